"""The semantic cache on the real pipeline (Kafka, Redis, the assembly job with the bundled
MiniLM, a fake engine): a paraphrase of a context-free question asked in another
conversation is answered from the cache, streamed like any answer, without the engine;
other tenants and questions with history are not."""

from __future__ import annotations

import uuid

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt
from harness.polling import eventually
from harness.stack import pipeline
from runtime.settings import Settings
from stream_jobs.assembly.cache.semantic_cache import SemanticCache
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta

pytestmark = pytest.mark.integration


async def stored(cache: SemanticCache) -> bool:
    return (await cache.stats("acme")).stores >= 1


async def test_a_paraphrase_is_answered_from_the_cache_for_the_same_tenant_only(services):
    settings = Settings.from_env(
        namespace=f"cache-{uuid.uuid4().hex[:6]}", edge_port=0, cache_enabled=True
    )
    engine = FakeEngine(token_interval_s=0.002)
    async with pipeline(settings, engine) as running:
        async with EdgeClient.connect(running.url, running.token("ann", "acme")) as ann:
            first = await ann.ask(conv(), "What is the capital of France?")
        # the assembly job stores the answer when it reads turns.completed, a moment later
        cache = SemanticCache(running.worker.service.redis, running.worker.service.names.prefix)
        await eventually(lambda: stored(cache), timeout_s=30)
        async with EdgeClient.connect(running.url, running.token("bob", "acme")) as bob:
            conversation = conv()
            turn_id = await bob.start_turn(conversation, "what's the capital of france")
            events = [e async for e in bob.events(turn_id)]
            follow_up = await bob.ask(conversation, "What is the capital of France?")
        async with EdgeClient.connect(running.url, running.token("cy", "globex")) as cy:
            other_tenant = await cy.ask(conv(), "What is the capital of France?")
    cached = events[-1]
    shown = "".join(e.text for e in events if isinstance(e, ResponseDelta))
    assert cached.text == first.text and shown == first.text  # streamed like an answer
    assert turn_id not in engine.requests and first.turn_id in engine.requests
    route = (await assembled_prompt(settings, turn_id)).route
    assert route.cache_hit and route.cache_similarity >= settings.cache_threshold
    # with history, or for another tenant, the engine answers
    assert follow_up.turn_id in engine.requests and other_tenant.turn_id in engine.requests
    assert not (await assembled_prompt(settings, other_tenant.turn_id)).route.cache_hit
