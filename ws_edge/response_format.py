"""A client's `response_format` checked and turned into the engine's (pure).

The schema reaches a grammar compiler on every inference worker, so the edge refuses what
would fail there or cost it: a schema that is not valid JSON Schema (checked against its own
draft's metaschema), one over the size limit or nested deeper than `MAX_DEPTH`, and a `$ref`
that is not local (`#/...`): no worker ever fetches a URL a client named. `strict: false`
is refused rather than ignored: answers here are always held to the schema.
"""

from __future__ import annotations

from typing import Any

import msgspec
from jsonschema import exceptions as schema_errors
from jsonschema import validators

from schemas.events import OutputFormat, ResponseFormat
from ws_edge.errors import InvalidMessage
from ws_edge.messages import JsonObjectFormat, JsonSchemaFormat, ResponseFormatOption

CODE = "invalid_response_format"
MAX_DEPTH = 32  # nesting of the schema document (objects and arrays)
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


def decoding_format(
    option: ResponseFormatOption | None, *, max_bytes: int
) -> ResponseFormat | None:
    """What the engine enforces (None: free text), or `InvalidMessage` saying why not."""
    if option is None or not isinstance(option, JsonObjectFormat | JsonSchemaFormat):
        return None
    if isinstance(option, JsonObjectFormat):
        return ResponseFormat(type=OutputFormat.JSON_OBJECT)
    spec = option.json_schema
    if spec.strict is False:
        raise InvalidMessage(
            "response_format.json_schema.strict: false is not supported (answers always "
            "follow the schema); leave it out or send true",
            code=CODE,
        )
    text = schema_text(spec.schema, max_bytes=max_bytes)
    return ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema=text, name=spec.name)


def schema_text(
    schema: dict[str, Any],
    *,
    max_bytes: int,
    what: str = "response_format's schema",
    code: str = CODE,
) -> str:
    """`schema` as the JSON text an engine compiles, or `InvalidMessage` (`code`, naming
    `what`) unless it is within `max_bytes` and passes `check_schema`. A tool's parameters
    are held to the same rules (ws_edge/tools.py)."""
    text = msgspec.json.encode(schema)
    if len(text) > max_bytes:
        raise InvalidMessage(f"{what} is {len(text)} bytes; the limit is {max_bytes}", code=code)
    check_schema(schema, what=what, code=code)
    return text.decode()


def check_schema(
    schema: dict[str, Any], *, what: str = "response_format's schema", code: str = CODE
) -> None:
    """`InvalidMessage` unless `schema` is a valid, local, reasonably shallow JSON Schema."""
    _walk(schema, depth=0, path="", what=what, code=code)
    if not isinstance(schema.get("$schema", ""), str):
        raise InvalidMessage(f"{what}: $schema must be a string", code=code)
    validator = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except schema_errors.SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise InvalidMessage(
            f"{what} is not a valid JSON Schema at {where}: {err.message}",
            code=code,
        ) from None
    except Exception as err:  # the checker itself tripped on hostile input: still a refusal
        raise InvalidMessage(
            f"{what} could not be read as a JSON Schema: {err!r}", code=code
        ) from None


def _walk(node: Any, *, depth: int, path: str, what: str, code: str) -> None:
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"{what} nests deeper than {MAX_DEPTH} levels at {path}", code=code)
    if isinstance(node, dict):
        ref = next((node[k] for k in _REFERENCES if isinstance(node.get(k), str)), None)
        if ref is not None and not ref.startswith("#"):
            raise InvalidMessage(
                f"{what} refers outside itself ($ref {ref!r} at {path or '(root)'}): only "
                "local references (#/...) are followed",
                code=code,
            )
        for key, value in node.items():
            _walk(value, depth=depth + 1, path=f"{path}/{key}", what=what, code=code)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, depth=depth + 1, path=f"{path}/{i}", what=what, code=code)
