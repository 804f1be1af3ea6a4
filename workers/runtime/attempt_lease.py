"""An answer streaming elsewhere is not restarted: a worker handed a turn that another
worker is still answering waits for that answer instead of generating a second one.

Why it happens: Kafka gives a partition to another member when it thinks the first one
is gone: a killed worker (the failover we want), but also a live worker whose heartbeats
could not reach the group coordinator for a session timeout (a paused broker). The live
one keeps fetching its old partitions until its next commit fails, so for a while both
take the same turns. Without a lease both answered: the client was told `restarted`, and
whichever recorded first won, so its last attempt could end with the other's text (a
stream that was not whole, found by the cluster's broker-pause fault).

How: a worker starting a turn claims its live lease (`SET NX PX`, the worker's id, in the
same round trip as its other checks); its relay pushes the lease forward with the log's TTL
(at least every `ttl_refresh_s` while frames flow) and drops it with the final frame. A
worker that finds the lease taken polls until the turn is recorded (it then replays the
outcome) or the lease lapses (the attempt died: it claims the lease and takes over). A
killed worker's turns are barely delayed: Kafka hands them over a session timeout (10 s)
after its last heartbeat, by when its lease (a refresh period and a half, 7.5 s) has
about run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from redis.asyncio import Redis

from schemas.channels import RedisNames


async def wait_for_live_attempt(
    redis: Redis,
    names: RedisNames,
    turn_id: str,
    owner: str,
    lease_s: float,
    *,
    poll_s: float = 0.25,
) -> tuple[bytes | None, bytes | None, float]:
    """While another attempt holds the turn's lease, wait; then (the done marker, the
    decided outcome, seconds waited). With neither, the lease is ours now: generate."""
    started = time.monotonic()
    lease_ms = int(lease_s * 1000)
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.get(names.done_key(turn_id))
            pipe.get(names.decided_key(turn_id))
            pipe.set(names.turn_live_key(turn_id), owner, nx=True, px=lease_ms)
            recorded, decided, claimed = await pipe.execute()
        if recorded is not None or decided is not None or claimed:
            return recorded, decided, time.monotonic() - started
        await asyncio.sleep(poll_s)


# compare and delete in one step: a lease that lapsed and was claimed by another worker
# between a GET and a DEL must stay that worker's
_DROP_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def release_lease(redis: Redis, names: RedisNames, turn_id: str, owner: str) -> None:
    """A worker that stops mid-answer (its turn goes back to Kafka, uncommitted) drops its
    lease, if still its own, so the redelivery does not wait for it to lapse. Best effort
    and brief: the worker is shutting down, and a lease left behind only costs a wait."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            await redis.eval(_DROP_IF_OWNER, 1, names.turn_live_key(turn_id), owner)
