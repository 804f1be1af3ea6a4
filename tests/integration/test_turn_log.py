"""The relay script on real Redis: frames are logged and published in one step, with dense
positions per attempt; a failed-over attempt opens a new epoch and its stale frames are not
shown; watching edges get the frames too; the log expires sooner once the answer ended."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness.factories import completed
from runtime.redis import redis_client
from schemas.channels import RedisNames
from schemas.events import InputTranscribed, SpeechAudio, TokenChunk, TurnStarted
from schemas.turn_log import LogPosition, decode_relay_message, parse_entry_id
from workers.runtime.relay import LogLimits, RelayPublisher

pytestmark = pytest.mark.integration

P = LogPosition


def chunk(turn_id: str, seq: int, attempt: str) -> TokenChunk:
    return TokenChunk(
        turn_id=turn_id, seq=seq, text=f"{attempt}:{seq}", emitted_at_ms=1.0, attempt=attempt
    )


def started(turn_id: str, attempt: str) -> TurnStarted:
    return TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt=attempt)


async def received(pubsub, count: int) -> list:
    frames: list = []
    async with asyncio.timeout(10):
        while len(frames) < count:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message is not None:
                frames += decode_relay_message(message["data"])
    return frames


async def test_positions_epochs_watchers_and_expiry(services, session_namespace):
    names = RedisNames.for_namespace(f"{session_namespace}-turnlog")
    redis = redis_client(services.redis_url)
    relay = RelayPublisher(
        redis, names, limits=LogLimits(max_entries=1000, live_ttl_s=600, done_ttl_s=30)
    )
    sender = asyncio.create_task(relay.run())
    turn = uuid.uuid4().hex
    origin, watcher = names.edge_channel("origin"), names.edge_channel("watcher")
    pubsub, watching = redis.pubsub(), redis.pubsub()
    await pubsub.subscribe(origin)
    await watching.subscribe(watcher)
    try:
        heard = InputTranscribed(turn_id=turn, text="hi", segments=[], audio_s=1.0)
        relay.publish(origin, heard)  # before any attempt: epoch 0
        relay.publish(origin, started(turn, "a1"))
        for seq in range(3):
            relay.publish(origin, chunk(turn, seq, "a1"))
        audio = SpeechAudio(
            turn_id=turn, attempt="a1", index=0, text="hi", char_start=0, sample_rate=16000
        )
        relay.publish(origin, audio)  # live only
        first = await received(pubsub, 6)
        assert [p for _, p in first] == [P(0, 1), P(1, 0), P(1, 1), P(1, 2), P(1, 3), None]
        assert first[0][0] == heard and first[5][0] == audio

        # another edge watches now (a client resumed there); the answer fails over
        await redis.sadd(names.turn_watchers_key(turn), watcher)
        relay.publish(origin, started(turn, "a2"))
        relay.publish(origin, chunk(turn, 3, "a1"))  # the first worker, still streaming
        relay.publish(origin, chunk(turn, 0, "a2"))
        await relay.publish_confirmed(origin, completed(turn, text="a2:0"))
        second = await received(pubsub, 3)
        assert [p for _, p in second] == [P(2, 0), P(2, 1), P(2, 2)]
        assert [type(e).__name__ for e, _ in second] == [
            "TurnStarted",
            "TokenChunk",
            "TurnCompleted",
        ]
        assert second[1][0].attempt == "a2"  # the stale a1 frame was not shown
        assert await received(watching, 3) == second  # the watcher got the same frames

        entries = await redis.xrange(names.turn_log_key(turn))
        assert [parse_entry_id(i) for i, _ in entries] == [
            P(0, 1),
            P(1, 0),
            P(1, 1),
            P(1, 2),
            P(1, 3),
            P(2, 0),
            P(2, 1),
            P(2, 2),
        ]  # no audio, no stale frame
        assert 0 < await redis.ttl(names.turn_log_key(turn)) <= 30  # ended: kept briefly
    finally:
        sender.cancel()
        await pubsub.aclose()
        await watching.aclose()
        await redis.delete(
            names.turn_log_key(turn), names.turn_epochs_key(turn), names.turn_watchers_key(turn)
        )
        await redis.aclose()


@pytest.mark.parametrize("refresh_s", [3600.0, 0.0])
async def test_a_live_log_expiry_is_pushed_forward_every_few_seconds_not_per_token(
    services, session_namespace, refresh_s: float
):
    """The first batch sets the live TTL; later tokens push it forward only once
    `ttl_refresh_s` has passed (here: never, or every batch); the final frame always sets the
    short one."""
    names = RedisNames.for_namespace(f"{session_namespace}-turnlog-ttl")
    redis = redis_client(services.redis_url)
    limits = LogLimits(live_ttl_s=600, done_ttl_s=30, ttl_refresh_s=refresh_s)
    relay = RelayPublisher(redis, names, limits=limits)
    sender = asyncio.create_task(relay.run())
    turn, origin = uuid.uuid4().hex, names.edge_channel("origin")
    log_key, epochs_key = names.turn_log_key(turn), names.turn_epochs_key(turn)
    try:
        await relay.publish_confirmed(origin, started(turn, "a1"))
        assert 590 < await redis.ttl(log_key) <= 600
        await redis.expire(log_key, 100)  # stands for time passing
        await redis.expire(epochs_key, 100)
        await relay.publish_confirmed(origin, chunk(turn, 0, "a1"))
        ttls = (await redis.ttl(log_key), await redis.ttl(epochs_key))
        if refresh_s:
            assert all(0 < ttl <= 100 for ttl in ttls), ttls  # not pushed per token
        else:
            assert all(590 < ttl <= 600 for ttl in ttls), ttls
        await relay.publish_confirmed(origin, completed(turn, text="a1:0"))
        assert 0 < await redis.ttl(log_key) <= 30
    finally:
        sender.cancel()
        await redis.aclose()


async def test_the_relay_loads_its_script_again_when_redis_lost_it(services, session_namespace):
    """The relay runs bare EVALSHAs (no SCRIPT EXISTS per batch); after Redis forgot its
    scripts (a restart without them), the next batch is loaded again and lands, not dropped."""
    names = RedisNames.for_namespace(f"{session_namespace}-turnlog-noscript")
    redis = redis_client(services.redis_url)
    relay = RelayPublisher(redis, names)
    sender = asyncio.create_task(relay.run())
    turn, origin = uuid.uuid4().hex, names.edge_channel("origin")
    try:
        await relay.publish_confirmed(origin, started(turn, "a1"))
        await redis.script_flush()
        await relay.publish_confirmed(origin, chunk(turn, 0, "a1"))
        entries = await redis.xrange(names.turn_log_key(turn))
        assert [parse_entry_id(i) for i, _ in entries] == [P(1, 0), P(1, 1)]
    finally:
        sender.cancel()
        await redis.aclose()


async def test_a_paced_relay_joins_a_fast_answer_into_fewer_frames_in_order(
    services, session_namespace
):
    """With a pace, chunks that come faster than it reach the edge joined (the first one's
    seq, the texts in order), the first at once; a frame that ends the turn takes the held
    chunk before it; the log holds the same joined frames a resuming client reads."""
    names = RedisNames.for_namespace(f"{session_namespace}-paced")
    redis = redis_client(services.redis_url)
    relay = RelayPublisher(redis, names, pace_s=0.2)
    sender = asyncio.create_task(relay.run())
    turn = uuid.uuid4().hex
    origin = names.edge_channel("origin")
    pubsub = redis.pubsub()
    await pubsub.subscribe(origin)
    try:
        relay.publish(origin, started(turn, "a1"))
        for seq in range(20):  # faster than any pace: all in one step of the loop
            relay.publish(origin, chunk(turn, seq, "a1"))
        first = await received(pubsub, 3)  # the third once the pace is up
        assert [(e.seq, e.text) for e, _ in first[1:]] == [
            (0, "a1:0"),
            (1, "".join(f"a1:{s}" for s in range(1, 20))),
        ]
        relay.publish(origin, chunk(turn, 20, "a1"))  # within the pace: held…
        await relay.publish_confirmed(origin, completed(turn, text="done"))  # …until this
        last = await received(pubsub, 2)
        assert [(type(e).__name__, getattr(e, "text", "")) for e, _ in last] == [
            ("TokenChunk", "a1:20"),
            ("TurnCompleted", "done"),
        ]
        logged = [p for _, p in first + last]
        entries = await redis.xrange(names.turn_log_key(turn))
        assert [parse_entry_id(i) for i, _ in entries] == logged == [P(1, n) for n in range(5)]
    finally:
        sender.cancel()
        await pubsub.aclose()
        await redis.delete(
            names.turn_log_key(turn), names.turn_epochs_key(turn), names.turn_watchers_key(turn)
        )
        await redis.aclose()
