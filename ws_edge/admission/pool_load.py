"""The pools' load as overload control reads it: the workers' state boards in Redis
(`schemas.worker_state`), summed per pool, cached for a moment so a burst of turns costs
one read per pool. An unreadable board means no signal, which is not overload: the rate
limits still hold, and refusing everyone because Redis hiccuped would be worse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from runtime.state_board import read_states
from schemas.channels import RedisNames
from schemas.worker_state import fresh
from ws_edge.admission.overload import LoadSignal

log = logging.getLogger("turnstream.edge.load")


class PoolLoad:
    def __init__(
        self,
        redis: Redis,
        names: RedisNames,
        pools: tuple[str, ...],
        *,
        ttl_ms: float,
        clock_ms: Callable[[], float],
        max_age_ms: float = 250.0,
    ) -> None:
        self.redis = redis
        self.names = names
        self.pools = pools
        self.ttl_ms = ttl_ms
        self.clock_ms = clock_ms
        self.max_age_ms = max_age_ms
        self._cached: tuple[float, dict[str, LoadSignal]] | None = None

    def forget(self) -> None:
        """Drop the cached board: the next read goes to Redis (after a known change)."""
        self._cached = None

    async def signals(self) -> dict[str, LoadSignal]:
        now = self.clock_ms()
        if self._cached is not None and now - self._cached[0] < self.max_age_ms:
            return self._cached[1]
        signals: dict[str, LoadSignal] = {}
        for pool in self.pools:
            try:
                states = await read_states(self.redis, self.names.worker_states_key(pool))
            except (RedisError, TimeoutError, OSError) as err:
                log.warning("load of pool %s unknown (%r): not treated as overload", pool, err)
                continue
            live = fresh(states, now, self.ttl_ms)
            if live:  # no live worker: no signal (routing sends its turns elsewhere)
                signals[pool] = LoadSignal(
                    in_flight=sum(s.in_flight for s in live),
                    capacity=sum(s.capacity for s in live),
                )
        self._cached = (now, signals)
        return signals
