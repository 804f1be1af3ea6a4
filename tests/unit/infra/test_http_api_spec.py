"""The committed OpenAPI document (docs/protocol/openapi.json) is true to the HTTP door."""

from __future__ import annotations

import json
from types import SimpleNamespace

from openapi_spec_validator import validate

from infra.http_api_spec import REGENERATE, SPEC_PATH, build_spec, render
from runtime.settings import Settings
from ws_edge.http.app import build_app
from ws_edge.http.chat_request import SUPPORTED, ChatRequest
from ws_edge.http.statuses import STATUS


def test_committed_spec_is_current_and_valid_openapi_3_1():
    committed = SPEC_PATH.read_text(encoding="utf-8")
    assert committed == render(build_spec()), f"the HTTP API spec is stale: run {REGENERATE}"
    validate(json.loads(committed))


def test_every_route_the_door_serves_is_documented():
    app = build_app(SimpleNamespace(settings=Settings()))  # type: ignore[arg-type]
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD"
    }
    spec = build_spec()
    documented = {(method, path) for path, ops in spec["paths"].items() for method in ops}
    assert served == documented


def test_the_request_schema_is_the_set_of_fields_the_door_accepts():
    spec = build_spec()
    fields = set(spec["components"]["schemas"]["ChatRequest"]["properties"])
    assert fields == set(SUPPORTED) == set(ChatRequest.__struct_fields__)


def test_every_error_status_the_door_answers_with_is_documented():
    documented = {
        status
        for ops in build_spec()["paths"].values()
        for op in ops.values()
        for status in op["responses"]
    }
    assert {str(status) for status in STATUS.values()} <= documented
