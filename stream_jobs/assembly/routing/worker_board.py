"""Reading the pools' state boards from Redis for the router (`schemas.worker_state`).

A read costs one HGETALL per pool; it is cached for `max_age_ms` (well under the workers'
write interval), so a burst of turns costs one read, not one per turn. An entry that does
not decode is skipped (a worker of a newer version, a half-written value); an unreachable
Redis gives an empty board, and the router falls back to Kafka's key hashing: routing
degrades, turns still flow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from runtime.state_board import read_states
from schemas.channels import RedisNames
from schemas.worker_state import WorkerState

log = logging.getLogger("turnstream.assembly.board")

READ_TIMEOUT_S = 0.2


class WorkerBoard:
    def __init__(
        self,
        redis: Callable[[], Redis],
        names: RedisNames,
        *,
        max_age_ms: float = 100.0,
        clock_ms: Callable[[], float],
    ) -> None:
        self._redis = redis
        self.names = names
        self.max_age_ms = max_age_ms
        self.clock_ms = clock_ms
        self._cache: dict[str, tuple[float, list[WorkerState]]] = {}
        self._failing = False

    async def states(self, pool: str) -> list[WorkerState]:
        now = self.clock_ms()
        cached = self._cache.get(pool)
        if cached is not None and now - cached[0] < self.max_age_ms:
            return cached[1]
        states = await self._read(pool)
        self._cache[pool] = (now, states)
        return states

    async def _read(self, pool: str) -> list[WorkerState]:
        key = self.names.worker_states_key(pool)
        try:
            states = await read_states(self._redis(), key, timeout_s=READ_TIMEOUT_S)
        except (RedisError, TimeoutError, OSError) as err:
            if not self._failing:
                self._failing = True
                log.warning("worker states unreadable (%r): routing by key hash", err)
            return []
        self._failing = False
        return states
