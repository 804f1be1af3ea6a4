"""Routing on what the engines really hold: two inference workers on real vLLM engines (the
tiny model, a KV cache of 16 blocks so eviction comes quickly) publish their KV events;
each worker mirrors its engine's blocks into Redis and the assembly job hashes every prompt
as vLLM does and asks the mirrors (edge, Kafka, Redis, the assembly job all real).

One conversation is followed through its life: its follow-up goes to the engine that holds
its prefix (and vLLM reuses it); once that engine evicted it, the prefix no longer
attracts the conversation; a worker that stops takes its blocks with it."""

from __future__ import annotations

import uuid

import pytest

from harness.kafka import records_so_far
from harness.polling import eventually
from harness.routed import board_states, engines_on_own_cores, routed_pipeline
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.events import DecodingParams, Message, Route, TurnCompleted
from schemas.topics import TURNS_COMPLETED
from workers.inference.engines.engine import GenerationRequest
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.timeout(600)

TENANT = "bench"
DOCUMENT = "Summarise this contract about apples and pears: " + (
    "clause {n} says the seller shall deliver {n} crates. " * 12
)


@pytest.fixture(scope="module")
async def two_engines(tiny_model_path):
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    options = VllmOptions(
        model_path=str(tiny_model_path),
        model_name="tiny-llama",
        max_model_len=1024,
        kv_cache_bytes=4 * 1024 * 1024,  # 16 blocks of 128 tokens
        max_num_seqs=8,
        kv_events=True,
    )
    engines = engines_on_own_cores(lambda: VllmEngine(options), 2)
    yield engines
    for engine in engines:
        await engine.close()


@pytest.fixture
async def routed(services: Settings, session_namespace: str, tiny_model_path, two_engines):
    settings = Settings.from_env(
        namespace=f"{session_namespace}-kv-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        pools="chat",
        routing_strategy="router",
        safety_output_policy="off",
        safety_screening=False,
        router_classifier=False,
        cache_enabled=False,
        model_path=str(tiny_model_path),
        max_model_len=1024,
        max_num_seqs=8,
        kv_events_flush_ms=50,
    )
    async with routed_pipeline(settings, two_engines, tenant=TENANT) as running:
        yield running


async def route_of(settings: Settings, turn_id: str) -> tuple[Route, str]:
    """The turn's route and the worker that answered, from its `turn.completed`."""
    records = await records_so_far(
        settings.kafka_bootstrap,
        TURNS_COMPLETED.full_name(settings.namespace),
        lambda r: turn_id.encode() in r.value,
    )
    for record in records:
        event = decode(record.value)
        if isinstance(event, TurnCompleted) and event.turn_id == turn_id:
            assert event.route is not None
            return event.route, event.worker_id
    raise AssertionError(f"no turn.completed for {turn_id}")


async def held_by(settings: Settings, worker: str, blocks: list[int]) -> list[int]:
    redis = redis_client(settings.redis_url)
    try:
        key = RedisNames.for_namespace(settings.namespace).kv_blocks_key("chat", worker)
        return [int(flag) for flag in await redis.smismember(key, blocks)]
    finally:
        await redis.aclose()


async def test_a_prefix_draws_its_conversation_while_held_and_not_after(routed):
    settings, engines = routed.settings, routed.engines
    async with EdgeClient.connect(routed.url, routed.token("kv-user")) as client:
        first = await client.ask("kv-conv", DOCUMENT, max_tokens=8)
        route, worker = await route_of(settings, first.turn_id)
        assert route.worker_id == worker and "new prefix" in route.pick_reason
        holder = int(worker.removeprefix("w"))

        # the first turn's prompt blocks are in its engine's mirror, and only there
        await eventually(lambda: _members(settings, worker), timeout_s=30)
        blocks = await _members(settings, worker)
        assert len(blocks) >= 2
        assert await held_by(settings, f"w{1 - holder}", blocks) == [0] * len(blocks)
        await eventually(lambda: _followed(settings, worker))

        second = await client.ask("kv-conv", "And what about clause 3?", max_tokens=8)
        route, answered = await route_of(settings, second.turn_id)
        assert route.worker_id == answered == worker
        # the router hashed the new prompt as the engine does and found its first turn
        assert route.prefix_tokens >= 128 * (len(blocks) - 1)
        assert "tokens held (KV events)" in route.pick_reason
        assert second.usage.cached_prompt_tokens >= route.prefix_tokens  # vLLM reused them

        # other traffic on that engine evicts the conversation's blocks (16 in all)
        for n in range(12):
            other = [Message(role="user", content=DOCUMENT.replace("apples", f"plums {n}"))]
            request = GenerationRequest(
                request_id=f"evict-{n}",
                messages=other,
                decoding=DecodingParams(max_tokens=2),
                cache_salt=TENANT,
            )
            async for _ in engines[holder].stream(request):
                pass
        await eventually(lambda: _none_held(settings, worker, blocks))

        third = await client.ask("kv-conv", "And clause 4?", max_tokens=8)
        route, _ = await route_of(settings, third.turn_id)
        assert route.prefix_tokens == 0 and "new prefix" in route.pick_reason

    # a worker that stops takes its blocks with it: its mirror is gone from Redis
    await routed.stop_worker(holder)
    key = RedisNames.for_namespace(settings.namespace).kv_blocks_key("chat", worker)
    redis = redis_client(settings.redis_url)
    try:
        assert not await redis.exists(key)
        survivor = RedisNames.for_namespace(settings.namespace).kv_blocks_key(
            "chat", f"w{1 - holder}"
        )
        ttl_ms = await redis.pttl(survivor)  # a crashed worker's set expires as its state
        assert 0 < ttl_ms <= settings.worker_state_ttl_ms
    finally:
        await redis.aclose()
    assert [s.worker_id for s in await board_states(settings)] == [f"w{1 - holder}"]


async def _members(settings: Settings, worker: str) -> list[int]:
    redis = redis_client(settings.redis_url)
    try:
        key = RedisNames.for_namespace(settings.namespace).kv_blocks_key("chat", worker)
        return [int(h) for h in await redis.smembers(key)]
    finally:
        await redis.aclose()


async def _none_held(settings: Settings, worker: str, blocks: list[int]) -> bool:
    return not any(await held_by(settings, worker, blocks))


async def _followed(settings: Settings, worker: str) -> bool:
    states = {s.worker_id: s for s in await board_states(settings)}
    return worker in states and states[worker].kv_blocks is not None
