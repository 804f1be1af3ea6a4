"""A worker handed a turn that another worker still streams waits for that answer instead
of restarting it (real Redis): the relay stamps the streaming attempt's heartbeat, and the
new worker polls until the turn is recorded (it then replays that outcome) or the beat
goes stale (the attempt died: it takes over). Found by the cluster's broker pause: a live
worker evicted from its group kept streaming while another restarted its answer."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from harness.factories import completed
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import TokenChunk, TurnStarted
from workers.runtime.attempt_lease import wait_for_live_attempt
from workers.runtime.relay import RelayPublisher

pytestmark = pytest.mark.integration


@pytest.fixture
async def redis(services: Settings) -> AsyncIterator[Redis]:
    client = redis_client(services.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def relay(redis: Redis) -> AsyncIterator[RelayPublisher]:
    publisher = RelayPublisher(redis, NAMES)
    sender = asyncio.create_task(publisher.run())
    yield publisher
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender


NAMES = RedisNames.for_namespace(f"lease-{uuid.uuid4().hex[:6]}")


async def stream_some(relay: RelayPublisher, turn_id: str) -> None:
    """An attempt starts and streams a token, as a worker does."""
    started = TurnStarted(turn_id=turn_id, worker_id="w1", model="m", attempt="a1")
    relay.publish("edge", started)
    relay.publish(
        "edge", TokenChunk(turn_id=turn_id, seq=0, text="Hel", emitted_at_ms=1.0, attempt="a1")
    )
    await relay.flushed()


async def test_a_live_attempt_is_waited_for_and_its_outcome_replayed(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    await stream_some(relay, turn_id)
    assert await redis.hget(NAMES.turn_epochs_key(turn_id), "beat") is not None
    waiting = asyncio.create_task(
        wait_for_live_attempt(redis, NAMES, turn_id, relay.attempt_lease_s, poll_s=0.05)
    )
    await asyncio.sleep(0.3)
    assert not waiting.done(), "the new worker took over an answer that was still streaming"
    outcome = completed(turn_id, text="Hello")
    await redis.set(NAMES.done_key(turn_id), encode(outcome))  # the live attempt recorded it
    recorded, decided, _ = await asyncio.wait_for(waiting, 10)
    assert recorded == encode(outcome) and decided is None


async def test_a_dead_attempts_stale_beat_is_taken_over_at_once(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    await stream_some(relay, turn_id)
    seconds, _ = await redis.time()
    stale_ms = (seconds - relay.attempt_lease_s - 1) * 1000
    await redis.hset(NAMES.turn_epochs_key(turn_id), "beat", int(stale_ms))
    recorded, decided, _ = await asyncio.wait_for(
        wait_for_live_attempt(redis, NAMES, turn_id, relay.attempt_lease_s, poll_s=0.05), 5
    )
    assert recorded is None and decided is None  # nothing to replay: generate it again


async def test_a_turn_nobody_streamed_is_not_waited_for(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    recorded, decided, _ = await asyncio.wait_for(
        wait_for_live_attempt(redis, NAMES, turn_id, relay.attempt_lease_s, poll_s=0.05), 5
    )
    assert recorded is None and decided is None
