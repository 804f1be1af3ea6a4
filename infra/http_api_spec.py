"""The HTTP door as an OpenAPI 3.1 document, built from the types its handlers use.

Beside the WebSocket protocol's AsyncAPI document (`infra.protocol_spec`), and kept true the
same way: the committed `docs/protocol/openapi.json` must equal `build_spec()`
(tests/unit/infra/test_http_api_spec.py).

    python -m infra.http_api_spec            # print the document (JSON)
    python -m infra.http_api_spec --write    # regenerate docs/protocol/openapi.json
    python -m infra.http_api_spec --check    # exit 1, with what differs, if it is stale

Schemas come from `msgspec.json.schema_components` on the request (`chat_request`) and the
answers (`shapes`); the error responses of each route are the statuses its codes map to
(`statuses.STATUS`). The version is the WebSocket protocol's: one pipeline, two doors, and
the HTTP door's `turn.create` fields are the protocol's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from infra.protocol_spec import SPEC_VERSION, render, spec_cli
from ws_edge.http.app import COMPLETIONS
from ws_edge.http.chat_request import CONVERSATION_HEADER, IDEMPOTENCY_HEADER, ChatRequest
from ws_edge.http.shapes import (
    CancelResult,
    ChatCompletion,
    ChatCompletionChunk,
    ErrorResponse,
    ModelList,
)
from ws_edge.http.statuses import STATUS

SPEC_PATH = Path(__file__).resolve().parents[1] / "docs" / "protocol" / "openapi.json"
REGENERATE = "python -m infra.http_api_spec --write"
_REF = "#/components/schemas/{name}"

__all__ = ["REGENERATE", "SPEC_PATH", "build_spec", "main", "render"]


def _ref(cls: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=cls.__name__)}


def _errors(*statuses: int) -> dict[str, Any]:
    """The error responses, each with the protocol codes that answer with that status."""
    out = {}
    for status in statuses:
        codes = sorted(code for code, s in STATUS.items() if s == status)
        described = f"`{'`, `'.join(codes)}`" if codes else "any other code"
        out[str(status)] = {
            "description": f"OpenAI's error shape; `error.code`: {described}.",
            "content": {"application/json": {"schema": _ref(ErrorResponse)}},
        }
    return out


RESUME_HEADER = {
    "X-Turnstream-Resume-Url": {
        "description": "GET it (with Last-Event-ID) to resume the stream.",
        "schema": {"type": "string"},
    }
}
EVENT_STREAM = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "x-sse-data": _ref(ChatCompletionChunk),
        "x-sse-event-id": "epoch-offset: the event's position in the turn's log",
    }
}


def _sse(description: str) -> dict[str, Any]:
    return {"description": description, "headers": RESUME_HEADER, "content": EVENT_STREAM}


def _path_id() -> dict[str, Any]:
    return {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "The completion's `id` (`chatcmpl-<turn id>`).",
        "schema": {"type": "string"},
    }


def build_spec() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        [ChatRequest, ChatCompletion, ChatCompletionChunk, ErrorResponse, ModelList, CancelResult],
        ref_template=_REF,
    )
    completion_errors = _errors(400, 401, 403, 409, 413, 429, 500, 503)
    completions = {
        "post": {
            "operationId": "createChatCompletion",
            "summary": "Ask for an answer (OpenAI chat completions)",
            "description": (
                "`stream: true` answers with Server-Sent Events: chunks whose `id:` is their "
                "position in the turn's log, then `data: [DONE]`. Unsupported fields are "
                "refused by name (`unsupported_parameter`). Disconnecting never stops the "
                "answer."
            ),
            "parameters": [
                {
                    "name": CONVERSATION_HEADER,
                    "in": "header",
                    "description": "Keep the history on the server (send only the new message).",
                    "schema": {"type": "string"},
                },
                {
                    "name": IDEMPOTENCY_HEADER,
                    "in": "header",
                    "description": "A retry with the same key is the same turn, answered once.",
                    "schema": {"type": "string"},
                },
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(ChatRequest)}},
            },
            "responses": {
                "200": {
                    "description": "The answer (`stream: false`), or its event stream.",
                    "content": {
                        "application/json": {"schema": _ref(ChatCompletion)},
                        **EVENT_STREAM,
                    },
                    "headers": RESUME_HEADER,
                },
                **completion_errors,
            },
        }
    }
    resume = {
        "get": {
            "operationId": "resumeChatCompletion",
            "summary": "Follow an answer again, after the last event the client has",
            "description": (
                "The events after `Last-Event-ID` (or `after`), on any edge node: no gap, no "
                "duplicate. For EventSource, the token may be the `token` parameter; the "
                "stream ends after TURNSTREAM_SSE_MAX_STREAM_S and EventSource reconnects."
            ),
            "parameters": [
                _path_id(),
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                {"name": "after", "in": "query", "schema": {"type": "string"}},
                {"name": "token", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": _sse("The answer's events after the client's position."),
                **_errors(400, 401, 404, 409, 503),
            },
        }
    }
    cancel = {
        "post": {
            "operationId": "cancelChatCompletion",
            "summary": "Stop an answer (its stream ends with `turnstream.cancelled`)",
            "parameters": [_path_id()],
            "responses": {
                "200": {
                    "description": "Cancel sent to the pipeline.",
                    "content": {"application/json": {"schema": _ref(CancelResult)}},
                },
                **_errors(401, 404, 503),
            },
        }
    }
    models = {
        "get": {
            "operationId": "listModels",
            "summary": "What the router can pick (any `model` is accepted: the router decides)",
            "responses": {
                "200": {
                    "description": "`auto` and the pools.",
                    "content": {"application/json": {"schema": _ref(ModelList)}},
                },
                **_errors(401),
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "turnstream HTTP door",
            "version": SPEC_VERSION,
            "description": (
                "OpenAI-compatible chat completions over turnstream's pipeline, with "
                "resumable Server-Sent Events. The WebSocket door is docs/protocol/asyncapi.json."
            ),
        },
        "servers": [{"url": "http://127.0.0.1:8766", "description": "the local stack"}],
        "security": [{"bearer": []}],
        "paths": {
            COMPLETIONS: completions,
            COMPLETIONS + "/{id}/events": resume,
            COMPLETIONS + "/{id}/cancel": cancel,
            "/v1/models": models,
        },
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A signed token (as the WebSocket's) or an API key (tsk-…).",
                }
            },
        },
    }


def main(argv: list[str] | None = None) -> int:
    return spec_cli(
        argv,
        prog="python -m infra.http_api_spec",
        description=__doc__.splitlines()[0],
        build=build_spec,
        path=SPEC_PATH,
        version=SPEC_VERSION,
        regenerate=REGENERATE,
    )


if __name__ == "__main__":
    raise SystemExit(main())
