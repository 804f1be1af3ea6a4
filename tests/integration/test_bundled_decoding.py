"""The first answer a newcomer sees: the bundled SmolLM2 on vLLM, with the decoding defaults
every turn gets from the edge (temperature 0, TURNSTREAM_DEFAULT_FREQUENCY_PENALTY), does not
loop on open prompts and still answers a short factual question with its history. Measured by
repeated word 4-grams (the share of an answer's 4-grams seen earlier in it), never by time.
The same prompts without the penalty are run too: they loop, which shows the measure sees a
loop.

Measured 2026-12-03 (8 open prompts, 256 tokens): no penalty → repeated 4-grams mean 0.575
(max 0.89: "The sea is a place of endless …" until the limit); frequency penalty 0.5 → 0.083,
0.8 → 0.022 (max 0.082). A repetition penalty of 1.2 loops less still (0.003) but penalises
the prompt's tokens too: asked "And the capital of Italy?" after France, the model answered
"Paris and Italy together form the European Union's 28 member states …".
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bench.engines import build
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir, is_converted
from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import GenerationRequest

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

OPEN_PROMPTS = (
    "Write a short poem about the sea",
    "Tell me a story about a dragon.",
    "Describe your ideal city.",
    "Write a song about the moon.",
    "What makes a good friend?",
    "Write a short poem about mountains",
)
MAX_TOKENS = 200


def repeated_4grams(text: str) -> float:
    """The share of the text's word 4-grams that already occurred in it (0: none repeats)."""
    words = text.lower().split()
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def test_the_measure_sees_a_loop_and_not_a_plain_answer():
    loop = "The sea is a place of endless beauty, a place where the soul is free. " * 6
    assert repeated_4grams(loop) > 0.7
    assert repeated_4grams("In the depths of the blue a world of wonder waits for us") == 0.0


@pytest.fixture(scope="module")
async def smollm2():
    path = default_model_dir(Settings())
    assert is_converted(path), "infra/setup.sh converts the bundled model"
    engine = await asyncio.to_thread(build, "vllm", str(path), len(OPEN_PROMPTS))
    yield engine
    await engine.close()


async def answer(engine, messages: list[Message], decoding: DecodingParams) -> str:
    request = GenerationRequest(request_id=uuid.uuid4().hex, messages=messages, decoding=decoding)
    return "".join([d.text async for d in engine.stream(request)])


async def answers(engine, decoding: DecodingParams) -> list[str]:
    """One answer to each open prompt, all at once."""
    return await asyncio.gather(
        *(answer(engine, [Message(Role.USER, p)], decoding) for p in OPEN_PROMPTS)
    )


async def test_the_default_decoding_does_not_loop_where_plain_greedy_does(smollm2):
    edge_default = DecodingParams(
        max_tokens=MAX_TOKENS,
        frequency_penalty=Settings().default_frequency_penalty,
    )
    assert edge_default.temperature == 0.0  # what a turn without `temperature` gets
    plain = [repeated_4grams(a) for a in await answers(smollm2, DecodingParams(MAX_TOKENS))]
    ours = [repeated_4grams(a) for a in await answers(smollm2, edge_default)]
    print(f"repeated 4-grams: plain greedy {plain}, defaults {ours}")
    assert sum(plain) / len(plain) > 0.3  # the loop the defaults are there to stop
    assert sum(ours) / len(ours) < 0.08 and max(ours) < 0.25


async def test_the_default_decoding_still_answers_from_the_history(smollm2):
    decoding = DecodingParams(max_tokens=32, frequency_penalty=Settings().default_frequency_penalty)

    first = await answer(smollm2, [Message(Role.USER, "What is the capital of France?")], decoding)
    follow_up = [
        Message(Role.USER, "What is the capital of France?"),
        Message(Role.ASSISTANT, first),
        Message(Role.USER, "And the capital of Italy?"),
    ]
    second = await answer(smollm2, follow_up, decoding)
    assert "Paris" in first and "Rome" in second, (first, second)
