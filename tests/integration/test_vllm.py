"""The real vLLM engine (CPU build here) on a tiny model built by the tests."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Literal

import jsonschema
import msgspec
import openai
import pydantic
import pytest

from schemas.events import (
    DecodingParams,
    FinishReason,
    Message,
    OutputFormat,
    ResponseFormat,
    Role,
    ToolChoice,
    ToolSpec,
)
from schemas.tools import call_constraint, split_calls
from workers.inference.engines.engine import EngineError, GenerationRequest
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import (
    FunctionDefinition,
    FunctionTool,
    JsonSchema,
    JsonSchemaFormat,
    ResponseDelta,
    ResponseDone,
    ResponseToolCallDelta,
    ResponseToolCallDone,
    ToolResultInput,
)

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

LONG_SYSTEM = "You are a helpful concise assistant answering questions about the world. " * 12


def request(text: str, max_tokens: int = 16, system: str = LONG_SYSTEM) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.SYSTEM, system), Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.0),
    )


def unfinished(engine) -> int:
    return engine._llm.output_processor.get_num_unfinished_requests()


async def test_streams_deltas_with_exact_usage(tiny_engine):
    req = request("hello how are you", max_tokens=12)
    deltas = [d async for d in tiny_engine.stream(req)]
    assert deltas[-1].finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    assert sum(d.new_tokens for d in deltas) <= 12
    assert deltas[-1].prompt_tokens == len(tiny_engine.render(req))


async def test_greedy_decoding_is_deterministic(tiny_engine):
    first = "".join([d.text async for d in tiny_engine.stream(request("one two three"))])
    second = "".join([d.text async for d in tiny_engine.stream(request("one two three"))])
    assert first == second and first


async def test_the_engine_says_how_many_tokens_its_cache_holds(tiny_engine):
    # the worker bounds its prefix memory (the router's hint) by it
    assert tiny_engine.cache_tokens is not None and tiny_engine.cache_tokens >= 16


async def test_prefix_cache_serves_a_repeated_history(tiny_engine):
    [d async for d in tiny_engine.stream(request("the capital of france"))]
    deltas = [d async for d in tiny_engine.stream(request("the capital of italy"))]
    assert deltas[-1].cached_prompt_tokens > 0


async def test_the_prefix_cache_is_not_shared_between_tenants(tiny_engine):
    """A tenant's prompt never reuses blocks another tenant's identical prompt left (its
    timing would tell that tenant what the other asked); its own repeat does."""
    system = f"Notes {uuid.uuid4().hex}: " + LONG_SYSTEM  # nothing cached by other tests

    async def cached(tenant: str) -> int:
        req = replace(request("the capital of france", system=system), cache_salt=tenant)
        return [d async for d in tiny_engine.stream(req)][-1].cached_prompt_tokens

    assert await cached("acme") == 0
    assert await cached("globex") == 0  # the same prompt, another tenant
    assert await cached("acme") > 0  # the first tenant's own blocks


async def test_concurrent_requests_are_batched(tiny_engine):
    """Eight streams at once are generated together (vLLM's continuous batching), not one
    after another: some stream's first delta comes before another's last."""
    order: list[tuple[int, bool]] = []  # (stream, is its last delta), in arrival order

    async def stream(i: int) -> str:
        text = ""
        async for delta in tiny_engine.stream(request(f"question {i}", max_tokens=20)):
            text += delta.text
            order.append((i, delta.finish_reason is not None))
        return text

    results = await asyncio.gather(*[stream(i) for i in range(8)])
    assert all(results)
    open_at_once, most = set(), 0
    for i, last in order:
        open_at_once.add(i)
        most = max(most, len(open_at_once))
        if last:
            open_at_once.discard(i)
    assert most > 1  # in a one-at-a-time engine each stream ends before the next begins
    assert unfinished(tiny_engine) == 0


async def test_cancelling_the_stream_aborts_inside_vllm(tiny_engine):
    req = request("one two three four", max_tokens=900, system="")
    seen = []
    three_seen = asyncio.Event()

    async def consume():
        async for delta in tiny_engine.stream(req):
            seen.append(delta)
            if len(seen) == 3:
                three_seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(three_seen.wait(), 60)
    assert unfinished(tiny_engine) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if unfinished(tiny_engine) == 0:
            break
        await asyncio.sleep(0.02)
    assert unfinished(tiny_engine) == 0
    assert len(seen) < 900


async def test_pipeline_on_vllm_two_turns_and_a_cancel(vllm_pipeline):
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with EdgeClient.connect(vllm_pipeline.url, vllm_pipeline.token()) as client:
        # long enough to fill whole KV blocks, which is what the prefix cache keeps
        first = await client.ask(conversation, "hello how are you today " * 40, max_tokens=8)
        second = await client.ask(conversation, "and again", max_tokens=8)
        # The tiny model's weights are random, so its logits are near ties and its greedy
        # answer can differ between runs (batching, the prefix cache) and, rarely, end on
        # its own before a cancel sent at its first text reaches the engine: up to three
        # tries, one of which must end cancelled.
        ends = []
        for ask in ("go on", "tell me more", "continue please"):
            turn_id = await client.start_turn(conversation, ask, max_tokens=900)
            sent_cancel = False
            async for event in client.events(turn_id):
                if isinstance(event, ResponseDelta) and not sent_cancel:
                    sent_cancel = True
                    await client.cancel(turn_id)
                if isinstance(event, ResponseDone):
                    ends.append(event)
            if ends[-1].finish_reason == FinishReason.CANCELLED:
                break
    assert first.model == "tiny-llama" and first.usage.completion_tokens > 0
    # the second prompt holds the first exchange, so it is longer and mostly cached
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert second.usage.cached_prompt_tokens > 0
    cancelled = ends[-1]
    assert cancelled.finish_reason == FinishReason.CANCELLED, [e.finish_reason for e in ends]
    assert cancelled.usage.completion_tokens < 900
    assert unfinished(vllm_pipeline.engine) == 0


async def _collect(engine, req) -> str:
    return "".join([d.text async for d in engine.stream(req)])


# A shape a random-weight model can finish within a few tokens only if it is held to it.
REPORT = {
    "type": "object",
    "properties": {
        "unit": {"enum": ["km", "mi"]},
        "ok": {"type": "boolean"},
        "code": {"type": "string", "maxLength": 4},
    },
    "required": ["unit", "ok", "code"],
    "additionalProperties": False,
}


def formatted(text: str, fmt: ResponseFormat | None, max_tokens: int = 64) -> GenerationRequest:
    req = request(text, max_tokens=max_tokens)
    decoding = msgspec.structs.replace(req.decoding, response_format=fmt)
    return replace(req, decoding=decoding)


async def test_a_json_schema_holds_even_a_random_model(tiny_engine):
    """Guided decoding: the tiny model's weights are random, so its free answer is noise;
    held to the schema, every answer is an instance of it."""
    free = await _collect(tiny_engine, formatted("a report please", None))
    with pytest.raises(ValueError):
        json.loads(free)
    fmt = ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema=json.dumps(REPORT))
    for text in ("a report please", "another one", "und auf Deutsch"):
        answer = await _collect(tiny_engine, formatted(text, fmt))
        jsonschema.validate(json.loads(answer), REPORT)
    mode = await _collect(
        tiny_engine, formatted("any object", ResponseFormat(type=OutputFormat.JSON_OBJECT))
    )
    assert mode.lstrip().startswith("{")


async def test_a_schema_the_engine_cannot_compile_ends_the_turn_with_a_clear_error(tiny_engine):
    fmt = ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema='{"type": 7}')
    with pytest.raises(EngineError) as refused:
        await _collect(tiny_engine, formatted("x", fmt))
    assert refused.value.code == "invalid_response_format" and not refused.value.retryable


class Report(pydantic.BaseModel):
    """What the openai SDK's `parse` turns into a strict JSON Schema."""

    unit: Literal["km", "mi"]
    ok: bool


async def test_structured_answers_through_both_doors(vllm_pipeline):
    """The whole path on real vLLM: a WebSocket turn held to a schema, the openai SDK's
    `parse` (a pydantic model as `response_format`) on the HTTP door, and a bad schema
    refused before anything is accepted."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    fmt = JsonSchemaFormat(json_schema=JsonSchema(name="report", schema=REPORT))
    async with EdgeClient.connect(vllm_pipeline.url, vllm_pipeline.token()) as client:
        done = await client.ask(conversation, "a report", max_tokens=48, response_format=fmt)
        jsonschema.validate(json.loads(done.text), REPORT)
        bad = JsonSchemaFormat(json_schema=JsonSchema(name="x", schema={"$ref": "http://a/b"}))
        with pytest.raises(TurnRejected) as rejected:
            await client.start_turn(conversation, "again", response_format=bad)
        assert rejected.value.error.code == "invalid_response_format"
    sdk = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{vllm_pipeline.edge.http_port}/v1",
        api_key=vllm_pipeline.token("sdk-parse"),
        max_retries=0,
    )
    parsed = await sdk.chat.completions.parse(
        model="any",
        messages=[{"role": "user", "content": "a report"}],
        response_format=Report,
        max_tokens=48,
    )
    assert isinstance(parsed.choices[0].message.parsed, Report)


WEATHER_TOOL = FunctionTool(
    function=FunctionDefinition(
        name="get_weather",
        description="The weather in a city now",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    )
)


async def test_a_tool_call_and_its_result_through_the_pipeline(vllm_pipeline):
    """Function calling on real vLLM with a random-weight model: held to the tool's schema
    its call is well-formed; its result, returned with the next turn, is in that turn's
    prompt after the call, and the answer goes on from there."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with EdgeClient.connect(vllm_pipeline.url, vllm_pipeline.token()) as client:
        turn_id = await client.start_turn(
            conversation,
            "weather in Oslo?",
            max_tokens=48,
            tools=[WEATHER_TOOL],
            tool_choice="required",
        )
        events = [e async for e in client.events(turn_id)]
        deltas = [e for e in events if isinstance(e, ResponseToolCallDelta)]
        [call] = [e for e in events if isinstance(e, ResponseToolCallDone)]
        done = events[-1]
        assert isinstance(done, ResponseDone) and done.finish_reason == FinishReason.TOOL_CALLS
        assert done.tool_calls[0].call_id == call.call_id and call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL.function.parameters)
        assert json.loads("".join(d.delta for d in deltas))["arguments"] == json.loads(
            call.arguments
        )
        report = " ".join(f"hour {h} clear sky and four degrees" for h in range(15))
        output = json.dumps({"sky": "clear", "report": report})
        answer = await client.ask(
            conversation,
            "",
            max_tokens=8,
            tools=[WEATHER_TOOL],  # described in both prompts: the difference is the history
            tool_results=[ToolResultInput(call_id=call.call_id, output=output)],
        )
    assert answer.finish_reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS)
    # the second prompt holds the first question, the call and the result (~350 tokens of
    # it; without it the prompt grows by the question and the call alone: 82 tokens once)
    grew = answer.usage.prompt_tokens - done.usage.prompt_tokens
    assert grew >= len(output) // 4 + 10, grew


async def test_auto_tool_choice_compiles_and_lets_the_model_answer_in_text(tiny_engine):
    auto = call_constraint(
        [ToolSpec("get_weather", "", json.dumps(WEATHER_TOOL.function.parameters))], ToolChoice()
    )
    answer = await _collect(tiny_engine, formatted("hello", auto, max_tokens=16))
    rest, calls = split_calls(answer, "t", whole=False)
    for call in calls:  # whatever the model chose, a call it made is well-formed
        jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL.function.parameters)
    assert rest or calls


async def test_the_openai_sdk_drives_a_tool_round_trip_on_the_http_door(vllm_pipeline):
    """OpenAI's own client, stateless as it is used: tools and tool_choice in, a call out
    (whole and streamed), its result sent back as a `tool` message, an answer after it."""
    sdk = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{vllm_pipeline.edge.http_port}/v1",
        api_key=vllm_pipeline.token("sdk-tools"),
        max_retries=0,
    )
    tools = [msgspec.to_builtins(WEATHER_TOOL)]
    question = [{"role": "user", "content": "weather in Oslo?"}]
    first = await sdk.chat.completions.create(
        model="any", messages=question, tools=tools, tool_choice="required", max_tokens=48
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL.function.parameters)
    streamed = await sdk.chat.completions.create(
        model="any",
        messages=question,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=48,
        stream=True,
    )
    chunks = [c async for c in streamed]
    [piece] = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert piece.function.name == "get_weather" and chunks[-1].choices[0].finish_reason == (
        "tool_calls"
    )
    after = await sdk.chat.completions.create(
        model="any",
        messages=[
            *question,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
        ],
        tools=tools,
        tool_choice="none",
        max_tokens=8,
    )
    assert after.choices[0].finish_reason in ("stop", "length")
    assert not after.choices[0].message.tool_calls
