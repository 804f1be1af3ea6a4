"""A turn's `response_format`: what the edge lets through to the engines' grammar compilers
and what it refuses before the turn is accepted."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.events import OutputFormat
from ws_edge.errors import InvalidMessage
from ws_edge.messages import JsonObjectFormat, JsonSchema, JsonSchemaFormat, TextFormat
from ws_edge.response_format import MAX_DEPTH, decoding_format

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


def schema_format(schema: dict, **fields) -> JsonSchemaFormat:
    return JsonSchemaFormat(json_schema=JsonSchema(name="answer", schema=schema, **fields))


def refused(option, max_bytes: int = 16 * 1024) -> str:
    with pytest.raises(InvalidMessage) as caught:
        decoding_format(option, max_bytes=max_bytes)
    assert caught.value.code == "invalid_response_format"
    return str(caught.value)


def test_text_is_free_and_json_mode_is_any_object():
    assert decoding_format(None, max_bytes=10) is None
    assert decoding_format(TextFormat(), max_bytes=10) is None
    assert decoding_format(JsonObjectFormat(), max_bytes=10).type == OutputFormat.JSON_OBJECT


def test_a_schema_reaches_the_engine_as_its_json_text():
    fmt = decoding_format(schema_format(CITY, strict=True), max_bytes=16 * 1024)
    assert fmt.type == OutputFormat.JSON_SCHEMA and fmt.name == "answer"
    assert msgspec.json.decode(fmt.schema) == CITY


def test_an_invalid_schema_is_refused_naming_where():
    bad = {"type": "object", "properties": {"city": {"type": "strin"}}}
    assert "properties/city/type" in refused(schema_format(bad))
    assert "minItems" in refused(schema_format({"type": "array", "minItems": -1}))


@pytest.mark.parametrize(
    "ref", ["https://attacker.example/schema.json", "file:///etc/passwd", "other.json#/a"]
)
def test_a_reference_outside_the_schema_is_refused(ref):
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    assert ref in refused(schema_format(schema))


def test_a_local_reference_is_kept():
    schema = {
        "$defs": {"city": {"type": "string"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/city"}},
    }
    assert decoding_format(schema_format(schema), max_bytes=16 * 1024) is not None


def test_size_and_depth_are_bounded():
    assert "the limit is 64" in refused(schema_format(CITY), max_bytes=64)
    deep: dict = {"type": "string"}
    for _ in range(MAX_DEPTH):
        deep = {"type": "array", "items": deep}
    assert "deeper than" in refused(schema_format(deep))


def test_strict_false_is_refused_not_ignored():
    assert "strict" in refused(schema_format(CITY, strict=False))


schema_words = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "$ref",
        "$schema",
        "$defs",
        "enum",
        "required",
        "anyOf",
        "pattern",
        "minimum",
        "format",
        "$id",
        "$dynamicRef",
        "additionalProperties",
    ]
)
schema_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["object", "string", "#/$defs/a", "http://x/y", "[", "(?<", "date-time"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(schema_words | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(schema_words, schema_values, max_size=5))
def test_any_schema_is_either_passed_on_or_refused_with_the_code(schema):
    try:
        fmt = decoding_format(schema_format(schema), max_bytes=16 * 1024)
    except InvalidMessage as err:
        assert err.code == "invalid_response_format"
    else:
        assert msgspec.json.decode(fmt.schema) == schema
