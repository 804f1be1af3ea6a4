"""Engine options on the real vLLM (CPU build here): n-gram speculative decoding runs and leaves
greedy answers unchanged, and a turn's trace in ClickHouse says which options answered it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness.chdb import sink_trace_rows
from harness.stack import pipeline, running_job
from runtime.settings import Settings
from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import GenerationRequest
from workers.inference.engines.engine_profile import EngineProfile
from ws_edge.client import EdgeClient

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

NGRAM = EngineProfile(
    speculative="ngram",
    speculative_tokens=4,
    prompt_lookup_min=1,
    prompt_lookup_max=3,
    max_num_seqs=16,
    max_model_len=1024,
)
# answers that repeat their prompt (and a tiny random model's loops) give the drafts matches
PROMPTS = [
    "one two three four one two three four one two three four",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n",
    "the cat sat on the mat and the cat sat on the mat",
    "hello how are you",
]


@pytest.fixture(scope="module")
async def ngram_engine(tiny_model_path):
    """A second engine on the tiny model, speculating (the session's `tiny_engine` does not)."""
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    engine = VllmEngine(  # started like the session's tiny_engine (on the loop's thread)
        VllmOptions(
            model_path=str(tiny_model_path),
            model_name="tiny-llama",
            kv_cache_bytes=128 * 1024 * 1024,
            profile=NGRAM,
        )
    )
    yield engine
    await engine.close()


def request(text: str) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=48, temperature=0.0),
    )


async def answer(engine, text: str) -> tuple[str, int]:
    deltas = [d async for d in engine.stream(request(text))]
    return "".join(d.text for d in deltas), sum(d.new_tokens for d in deltas)


async def test_the_engine_runs_the_options_it_was_given(ngram_engine):
    spec = ngram_engine._llm.vllm_config.speculative_config
    assert (spec.method, spec.num_speculative_tokens) == ("ngram", 4)
    assert (spec.prompt_lookup_min, spec.prompt_lookup_max) == (1, 3)
    tag = ngram_engine.profile.tag()
    assert tag.startswith("spec=ngram:k4:n1-3,quant=none,tp=1,seqs=16,batched=")
    assert tag.endswith(",len=1024")


async def test_speculation_does_not_change_greedy_answers(ngram_engine, tiny_engine):
    before = ngram_engine.snapshot()
    for text in PROMPTS:
        plain = await answer(tiny_engine, text)
        speculated = await answer(ngram_engine, text)
        assert speculated == plain and plain[1] > 0, text
    drafted = ngram_engine.snapshot().since(before)
    # speculation really ran: tokens were drafted and some accepted (else equality is moot)
    assert drafted.spec_draft_tokens > 0 and drafted.spec_accepted_tokens > 0, drafted
    assert tiny_engine.snapshot().spec_draft_tokens == 0


async def test_a_turns_trace_carries_the_engine_options(
    services, session_namespace, ngram_engine, tmp_path
):
    settings = Settings.from_env(namespace=f"{session_namespace}-engine-options", edge_port=0)
    async with (
        pipeline(settings, ngram_engine) as p,
        running_job(settings, "traces"),
        EdgeClient.connect(p.url, p.token("opal")) as client,
    ):
        done = await client.ask(f"c-{uuid.uuid4().hex[:8]}", PROMPTS[0], max_tokens=16)
        columns = "engine_options, model, status, completion_tokens"
        args = (tmp_path / "home", settings.namespace, done.turn_id, columns)
        [(options, model, status, tokens)] = await asyncio.to_thread(sink_trace_rows, *args)
    assert options == ngram_engine.profile.tag() and options.startswith("spec=ngram:k4")
    assert (model, status, tokens) == ("tiny-llama", "completed", done.usage.completion_tokens)
