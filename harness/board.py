"""A pool's load on the real state board, written as inference workers write it, so an edge's
admission sees a busy pool with no worker running."""

from __future__ import annotations

from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.ids import now_ms
from schemas.worker_state import WorkerState, encode_state


async def write_load(
    settings: Settings, in_flight: int, capacity: int = 8, pool: str = "chat"
) -> None:
    """One worker of `pool` holding `in_flight` turns of `capacity`, fresh for a minute."""
    names = RedisNames.for_namespace(settings.namespace)
    redis = redis_client(settings.redis_url)
    state = WorkerState(
        worker_id="w-test",
        pool=pool,
        at_ms=now_ms() + 60_000,  # fresh for the whole test
        partitions=[0],
        capacity=capacity,
        in_flight=in_flight,
    )
    try:
        await redis.hset(names.worker_states_key(pool), "w-test", encode_state(state))
    finally:
        await redis.aclose()
