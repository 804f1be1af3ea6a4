"""A worker handed a turn that another worker still streams waits for that answer instead
of restarting it (real Redis). The first attempt claims the turn's live lease; its relay
pushes the lease forward as frames flow and drops it with the final frame; the second
worker waits until the turn is recorded (it then replays that outcome) or the lease lapses
(the attempt died: it takes over). Found by the cluster's broker pause: a worker evicted
from its group kept streaming while another restarted its answer, and the client's last
attempt ended with the other attempt's text."""

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
from workers.runtime.attempt_lease import release_lease, wait_for_live_attempt
from workers.runtime.relay import LogLimits, RelayPublisher

pytestmark = pytest.mark.integration

NAMES = RedisNames.for_namespace(f"lease-{uuid.uuid4().hex[:6]}")


@pytest.fixture
async def redis(services: Settings) -> AsyncIterator[Redis]:
    client = redis_client(services.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def relay(redis: Redis) -> AsyncIterator[RelayPublisher]:
    # a lease of 0.6 s (refresh every 0.4 s): lapses quickly once nothing pushes it
    publisher = RelayPublisher(redis, NAMES, limits=LogLimits(ttl_refresh_s=0.4))
    sender = asyncio.create_task(publisher.run())
    yield publisher
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender


def claim(redis: Redis, relay: RelayPublisher, turn_id: str, owner: str):
    return wait_for_live_attempt(redis, NAMES, turn_id, owner, relay.attempt_lease_s, poll_s=0.05)


def token(turn_id: str, seq: int) -> TokenChunk:
    return TokenChunk(turn_id=turn_id, seq=seq, text="x", emitted_at_ms=1.0, attempt="a1")


async def test_a_streaming_attempt_is_waited_for_and_its_outcome_replayed(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    assert await claim(redis, relay, turn_id, "w1") == (None, None, pytest.approx(0, abs=5))
    relay.publish("edge", TurnStarted(turn_id=turn_id, worker_id="w1", model="m", attempt="a1"))
    second = asyncio.create_task(claim(redis, relay, turn_id, "w2"))
    for seq in range(8):  # w1 streams for a few lease periods: the lease is pushed forward
        relay.publish("edge", token(turn_id, seq))
        await relay.flushed()
        await asyncio.sleep(0.2)
        assert not second.done(), "w2 took over an answer that was still streaming"
    outcome = completed(turn_id, text="xxxxxxxx")
    await redis.set(NAMES.done_key(turn_id), encode(outcome))  # w1 recorded it
    relay.publish("edge", outcome)  # and its final frame drops the lease
    await relay.flushed()
    assert await redis.exists(NAMES.turn_live_key(turn_id)) == 0
    recorded, decided, _ = await asyncio.wait_for(second, 10)
    assert recorded == encode(outcome) and decided is None  # w2 replays it


async def test_a_dead_attempts_lease_lapses_and_the_turn_is_taken_over(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    await claim(redis, relay, turn_id, "w1")  # w1 claims, then dies: nothing pushes it
    recorded, decided, _ = await asyncio.wait_for(claim(redis, relay, turn_id, "w2"), 10)
    assert recorded is None and decided is None  # nothing to replay: w2 generates it
    assert await redis.get(NAMES.turn_live_key(turn_id)) == b"w2"


async def test_a_stopping_worker_releases_only_its_own_lease(redis, relay):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    await claim(redis, relay, turn_id, "w1")
    await release_lease(redis, NAMES, turn_id, "w2")  # not w2's to drop
    assert await redis.get(NAMES.turn_live_key(turn_id)) == b"w1"
    await release_lease(redis, NAMES, turn_id, "w1")  # w1 stops mid-answer
    assert await redis.exists(NAMES.turn_live_key(turn_id)) == 0
