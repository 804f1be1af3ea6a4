import asyncio

import pytest

from schemas.events import DecodingParams, FinishReason, Message, Role
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
