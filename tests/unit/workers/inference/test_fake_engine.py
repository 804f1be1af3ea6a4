import asyncio
import json

import jsonschema
import pytest

from schemas.events import (
    DecodingParams,
    FinishReason,
    Message,
    OutputFormat,
    ResponseFormat,
    Role,
)
from workers.inference.engines.engine import EngineError, GenerationRequest
from workers.inference.engines.fake_engine import FakeEngine


def request(text: str, max_tokens: int = 100) -> GenerationRequest:
    return GenerationRequest(
        "r1", [Message(Role.USER, text)], DecodingParams(max_tokens=max_tokens)
    )


async def collect(engine, req):
    return [d async for d in engine.stream(req)]


async def test_fake_engine_answers_deterministically_and_honours_max_tokens():
    engine = FakeEngine(token_interval_s=0)
    deltas = await collect(engine, request("a b"))
    assert "".join(d.text for d in deltas) == "You said: a b (turn 1)"
    assert deltas[-1].finish_reason == FinishReason.STOP
    short = await collect(engine, request("a b", max_tokens=2))
    assert len(short) == 2 and short[-1].finish_reason == FinishReason.LENGTH


async def test_fake_engine_records_aborts_and_failures():
    engine = FakeEngine(token_interval_s=0.01, fail_on="boom")
    task = asyncio.create_task(collect(engine, request("x " * 50)))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.aborted == ["r1"] and engine.active == 0
    with pytest.raises(EngineError):
        await collect(engine, request("boom"))


async def test_fake_engine_ends_before_a_stop_string_as_vllm_does():
    engine = FakeEngine(token_interval_s=0)
    req = GenerationRequest(
        "r1", [Message(Role.USER, "a b c")], DecodingParams(max_tokens=100, stop=["b c", "zz"])
    )
    deltas = await collect(engine, req)
    assert "".join(d.text for d in deltas) == "You said: a "
    assert deltas[-1].finish_reason == FinishReason.STOP
    at_once = GenerationRequest(
        "r2", [Message(Role.USER, "x")], DecodingParams(max_tokens=100, stop=["You"])
    )
    assert "".join(d.text for d in await collect(engine, at_once)) == ""


async def test_the_fake_answers_in_the_shape_a_response_format_asks_for():
    """The fake stands in for guided decoding in pipeline tests (real engines are tested
    for the enforcement): its JSON must be an instance of the schema."""
    schema = {
        "$defs": {"unit": {"enum": ["km", "mi"]}},
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "population": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "unit": {"$ref": "#/$defs/unit"},
            "note": {"type": "string"},
        },
        "required": ["city", "population", "tags", "unit"],
    }
    fmt = ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema=json.dumps(schema))
    req = GenerationRequest(
        "r1", [Message(Role.USER, "a b")], DecodingParams(max_tokens=100, response_format=fmt)
    )
    answer = json.loads("".join(d.text for d in await collect(FakeEngine(token_interval_s=0), req)))
    jsonschema.validate(answer, schema)
    assert answer["city"] == "You said: a b (turn 1)" and "note" not in answer
    mode = ResponseFormat(type=OutputFormat.JSON_OBJECT)
    req = GenerationRequest("r2", req.messages, DecodingParams(response_format=mode))
    text = "".join(d.text for d in await collect(FakeEngine(token_interval_s=0), req))
    assert json.loads(text) == {"answer": "You said: a b (turn 1)"}
