"""An answer streaming elsewhere is not restarted: a worker handed a turn that another
worker is still answering waits for that answer instead of generating a second one.

Why it happens: Kafka gives a partition to another member when it thinks the first one
is gone: a killed worker (the failover we want), but also a live worker whose heartbeats
could not reach the group coordinator for a session timeout (a paused or failing broker,
a stalled network). The live one keeps streaming; the new one restarted the answer (the
client was told `restarted`), and whichever recorded first won, so the client's last
attempt could end with the other attempt's text: a stream that is not whole.

How: the relay stamps the turn's epochs hash with a heartbeat (`beat`, Redis time in ms)
whenever it pushes the log's TTL forward, at least every `ttl_refresh_s` while frames
flow. A beat younger than the lease (two refresh periods) means an attempt is alive; the
new worker polls until the turn is recorded (then it replays the outcome) or the beat goes
stale (the attempt died: it takes over, as before). A killed worker's turns are not
delayed: Kafka hands them over a session timeout (10 s) after its last heartbeat, by when
its beat is as old.
"""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from schemas.channels import RedisNames


def attempt_alive(beat: bytes | None, now_ms: int, lease_ms: int) -> bool:
    """An attempt beat within the lease (pure; no beat: none is streaming)."""
    if beat is None:
        return False
    try:
        return now_ms - int(beat) < lease_ms
    except ValueError:
        return False


async def wait_for_live_attempt(
    redis: Redis,
    names: RedisNames,
    turn_id: str,
    lease_s: float,
    *,
    poll_s: float = 0.25,
) -> tuple[bytes | None, bytes | None, float]:
    """While another attempt of the turn streams, wait; then (the done marker, the decided
    outcome, seconds waited): the caller replays an outcome, or takes the turn over."""
    started = time.monotonic()
    lease_ms = int(lease_s * 1000)
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.get(names.done_key(turn_id))
            pipe.get(names.decided_key(turn_id))
            pipe.hget(names.turn_epochs_key(turn_id), "beat")
            pipe.time()
            recorded, decided, beat, (seconds, micros) = await pipe.execute()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        if recorded is not None or decided is not None or not attempt_alive(beat, now_ms, lease_ms):
            return recorded, decided, time.monotonic() - started
        await asyncio.sleep(poll_s)
