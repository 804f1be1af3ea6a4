"""The transformers engine (continuous batching inside transformers, no vLLM) on the bundled
SmolLM2, checked against transformers' plain `generate`, then as the inference worker's
engine through Kafka and Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from harness.stack import pipeline
from runtime.settings import Settings
from runtime.smollm2 import convert, default_model_dir
from schemas.events import (
    DecodingParams,
    FinishReason,
    ImageInput,
    Message,
    OutputFormat,
    ResponseFormat,
    Role,
)
from workers.inference.engines.engine import EngineError, GenerationRequest
from workers.inference.engines.hf_engine import TransformersEngine, TransformersOptions
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

pytestmark = pytest.mark.integration

SYSTEM = "You are a helpful concise assistant answering questions about the world. " * 6
ESSAY = "Write a long essay about the history of the Roman Empire."  # runs for 100s of tokens


@pytest.fixture(scope="module")
def smollm2_path(base_settings: Settings) -> str:
    return str(convert(default_model_dir(base_settings)))  # once; a no-op when converted


@pytest.fixture(scope="module")
async def hf_engine(smollm2_path):
    engine = await asyncio.to_thread(
        TransformersEngine,
        TransformersOptions(
            model_path=smollm2_path,
            model_name="smollm2-hf",
            device="cpu",
            kv_cache_bytes=256 * 1024 * 1024,
            block_size=16,
            max_model_len=1024,
            max_num_seqs=8,
        ),
    )
    yield engine
    await engine.close()


def request(text: str, max_tokens: int = 24, system: str = "", **decoding) -> GenerationRequest:
    messages = [Message(Role.SYSTEM, system)] if system else []
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[*messages, Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=max_tokens, **decoding),
    )


async def collect(engine, req):
    return [d async for d in engine.stream(req)]


def reference_greedy(path: str, prompt: list[int], max_new_tokens: int, eos: list[int]):
    """transformers' own greedy `generate` on a separate copy of the model (no paging)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos
        )
    return out[0, len(prompt) :].tolist()


async def test_greedy_stream_is_what_generate_answers(hf_engine, smollm2_path):
    # Japanese in the answer: characters over several byte tokens, streamed whole
    req = request("How do you say 'thank you' and 'good morning' in Japanese?", max_tokens=40)
    deltas = await collect(hf_engine, req)
    prompt = hf_engine.render(req)
    expected = await asyncio.to_thread(
        reference_greedy, smollm2_path, prompt, 40, sorted(hf_engine.eos_token_ids)
    )
    text = "".join(d.text for d in deltas)
    assert text == hf_engine.tokenizer.decode(expected, skip_special_tokens=True)
    assert sum(d.new_tokens for d in deltas) == len(expected)
    assert len(deltas) > 1 and all(d.prompt_tokens == len(prompt) for d in deltas)
    assert "\ufffd" not in text and any(ord(c) > 0x3000 for c in text)
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)


async def test_max_tokens_ends_with_length(hf_engine):
    deltas = await collect(hf_engine, request(ESSAY, max_tokens=5))
    assert sum(d.new_tokens for d in deltas) == 5
    assert deltas[-1].finish_reason == FinishReason.LENGTH
    done = await collect(hf_engine, request("What is the capital of France?", max_tokens=64))
    assert done[-1].finish_reason == FinishReason.STOP  # it ended on its own end token


async def test_sampling_answers(hf_engine):
    deltas = await collect(hf_engine, request(ESSAY, max_tokens=12, temperature=0.9, top_p=0.9))
    assert sum(d.new_tokens for d in deltas) == 12 and "".join(d.text for d in deltas)


async def test_concurrent_requests_share_the_batch(hf_engine):
    running: list[int] = []
    finished = asyncio.Event()

    async def watch():
        while not finished.is_set():
            running.append(hf_engine.snapshot().running)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(
            *[collect(hf_engine, request(f"{ESSAY} Part {i}.", max_tokens=20)) for i in range(4)]
        )
    finally:
        finished.set()
        await watcher
    assert all(sum(d.new_tokens for d in r) == 20 for r in results)
    assert max(running) > 1  # several requests decoded in the same steps
    assert hf_engine.snapshot().running == 0


async def test_cancelling_one_request_aborts_it_and_the_others_finish(hf_engine):
    seen: list = []
    three = asyncio.Event()

    async def consume():
        async for delta in hf_engine.stream(request(ESSAY, max_tokens=500)):
            seen.append(delta)
            if len(seen) == 3:
                three.set()

    long = asyncio.create_task(consume())
    others = [
        asyncio.create_task(collect(hf_engine, request(f"{ESSAY} Part {i}.", max_tokens=16)))
        for i in range(2)
    ]
    await asyncio.wait_for(three.wait(), 120)
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    for answer in await asyncio.gather(*others):
        assert sum(d.new_tokens for d in answer) == 16
    for _ in range(100):  # the manager drops it at its next step
        snapshot = hf_engine.snapshot()
        if snapshot.running == snapshot.waiting == 0:
            break
        await asyncio.sleep(0.02)
    assert snapshot.running == snapshot.waiting == 0
    assert all(d.finish_reason is None for d in seen) and len(seen) < 500
    assert not hf_engine._manager.output_router.result_handlers  # nothing left behind


async def test_a_repeated_history_is_served_from_the_prefix_cache(hf_engine):
    before = hf_engine.snapshot()
    await collect(hf_engine, request("the capital of france?", max_tokens=4, system=SYSTEM))
    deltas = await collect(hf_engine, request("the capital of italy?", max_tokens=4, system=SYSTEM))
    assert deltas[-1].cached_prompt_tokens >= 16  # whole blocks of the shared system prompt
    grown = hf_engine.snapshot().since(before)
    assert grown.prefix_cache_hits >= deltas[-1].cached_prompt_tokens
    assert grown.prompt_tokens < grown.prefix_cache_queries  # the hits were not prefilled


async def test_images_and_overlong_prompts_are_refused(hf_engine):
    image = ImageInput(sha256="0" * 64, tensor_key="k", width=4, height=4, num_patches=1)
    req = request("what is this <image_1>")
    with pytest.raises(EngineError) as refused:
        await collect(hf_engine, dataclasses.replace(req, images=[image]))
    assert refused.value.code == "images_unsupported"
    with pytest.raises(EngineError) as overflow:
        await collect(hf_engine, request("word " * 1100, max_tokens=8))
    assert overflow.value.code == "context_overflow"


async def test_a_response_format_is_refused_not_ignored(hf_engine):
    """No guided decoding here: an answer that only looks like JSON would be a lie."""
    fmt = ResponseFormat(type=OutputFormat.JSON_OBJECT)
    with pytest.raises(EngineError) as refused:
        await collect(hf_engine, request("a city as JSON", response_format=fmt))
    assert refused.value.code == "response_format_unsupported"


@pytest.fixture(scope="module")
async def hf_pipeline(services: Settings, session_namespace: str, hf_engine):
    settings = Settings.from_env(namespace=f"{session_namespace}-hf", edge_port=0)
    async with pipeline(settings, hf_engine) as running:
        yield running


async def test_pipeline_on_transformers_two_turns_and_a_cancel(hf_pipeline):
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    async with EdgeClient.connect(hf_pipeline.url, hf_pipeline.token()) as client:
        first = await client.ask(conversation, "hello how are you today " * 10, max_tokens=8)
        second = await client.ask(conversation, "and again", max_tokens=8)
        turn_id = await client.start_turn(conversation, ESSAY, max_tokens=400)
        sent_cancel = False
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta) and event.seq >= 2 and not sent_cancel:
                sent_cancel = True
                await client.cancel(turn_id)
            if isinstance(event, ResponseDone):
                cancelled = event
    assert first.model == "smollm2-hf" and first.usage.completion_tokens > 0 and first.text
    # the second prompt holds the first exchange: longer, and its head comes from the cache
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert second.usage.cached_prompt_tokens > 0
    assert cancelled.finish_reason == FinishReason.CANCELLED
    assert cancelled.usage.completion_tokens < 400
    for _ in range(100):
        if hf_pipeline.engine.snapshot().running == 0:
            break
        await asyncio.sleep(0.02)
    assert hf_pipeline.engine.snapshot().running == 0
