"""The edge's relay after a lost subscription: frames and outcomes published while it was
away are read back from the turns' logs and done keys (real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from harness import factories
from runtime.redis import redis_client
from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import TokenChunk, TurnStarted
from workers.runtime.relay import RelayPublisher
from ws_edge.relay import RelaySubscriber

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def worker_relay(redis, names: RedisNames, turn_id: str) -> AsyncIterator[RelayPublisher]:
    """A worker's relay publishing to Redis; the turn's keys go at the end."""
    publisher = RelayPublisher(redis, names)
    sender = asyncio.create_task(publisher.run())
    try:
        yield publisher
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await redis.delete(
            names.turn_log_key(turn_id), names.turn_epochs_key(turn_id), names.done_key(turn_id)
        )
        await redis.aclose()


async def test_missed_outcomes_are_recovered_after_a_resubscribe(services, session_namespace):
    names = RedisNames.for_namespace(f"{session_namespace}-relay")
    redis = redis_client(services.redis_url)
    relay = RelaySubscriber(redis, names.edge_channel("e1"), names.done_key)
    waiting, other = uuid.uuid4().hex, uuid.uuid4().hex
    delivered = []

    def deliver(event, position) -> None:
        delivered.append((event, position))

    relay.route(waiting, deliver)
    relay.route(other, deliver)
    completed = factories.completed(waiting, text="the whole answer")
    try:
        await redis.set(names.done_key(waiting), encode(completed), ex=60)
        await relay._recover_outcomes()
    finally:
        await redis.delete(names.done_key(waiting))
        await redis.aclose()
    assert delivered == [(completed, None)]  # the other turn is still running: nothing for it


async def test_frames_missed_while_resubscribing_are_replayed_from_the_turns_log(
    services, session_namespace
):
    """Found by the fault suite (redis-restart): frames a worker logged and published while
    the edge's subscription was down reached nobody; the resubscribe reads them back from
    the turn's log, positions attached (each connection drops those it already has)."""
    names = RedisNames.for_namespace(f"{session_namespace}-relay-log")
    redis = redis_client(services.redis_url)
    turn_id = uuid.uuid4().hex
    frames = [TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")] + [
        TokenChunk(turn_id=turn_id, seq=i, text=f" w{i}", emitted_at_ms=0.0, attempt="a1")
        for i in range(5)
    ]
    delivered = []
    async with worker_relay(redis, names, turn_id) as publisher:
        for frame in frames:  # published while this edge was not subscribed
            publisher.publish(names.edge_channel("e1"), frame)
        await publisher.flushed()
        relay = RelaySubscriber(redis, names.edge_channel("e1"), names.done_key, names.turn_log_key)
        relay.route(turn_id, lambda event, position: delivered.append((event, position)))
        await relay._recover_outcomes()
    assert [event for event, _ in delivered] == frames
    positions = [position for _, position in delivered]
    assert None not in positions and positions == sorted(set(positions))


async def test_a_turn_whose_log_lacks_its_end_waits_for_it_not_for_the_done_key(
    services, session_namespace
):
    """The worker marks a turn done before its relay (retrying through the same Redis
    outage) has logged the last tokens and the completion: answering from the done key cut
    the client's deltas short (CI's redis-restart: 4 deltas, then `response.done`). The
    rest arrives live; the done key answers only a turn without a log."""
    names = RedisNames.for_namespace(f"{session_namespace}-relay-early-done")
    redis = redis_client(services.redis_url)
    turn_id = uuid.uuid4().hex
    started = TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt="a1")
    first = TokenChunk(turn_id=turn_id, seq=0, text=" w0", emitted_at_ms=0.0, attempt="a1")
    delivered = []
    async with worker_relay(redis, names, turn_id) as publisher:
        publisher.publish(names.edge_channel("e1"), started)
        publisher.publish(names.edge_channel("e1"), first)
        await publisher.flushed()
        completed = factories.completed(turn_id, text=" w0 w1 w2")
        await redis.set(names.done_key(turn_id), encode(completed), ex=60)  # marked early
        relay = RelaySubscriber(redis, names.edge_channel("e1"), names.done_key, names.turn_log_key)
        relay.route(turn_id, lambda event, position: delivered.append((event, position)))
        await relay._recover_outcomes()
    assert [event for event, _ in delivered] == [started, first]  # no early response.done
