"""The running canary experiment as the edge sees it: read from Redis at most once a second.

A stale read only delays a start, a promotion or a rollback by that long; Redis being away
or a config that does not parse means "no experiment" (control traffic), logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.canary import CanaryConfig, parse_config
from schemas.channels import RedisNames

log = logging.getLogger("turnstream.edge.canary")

REFRESH_MS = 1000.0


class CanaryWatch:
    def __init__(self, redis: Redis, names: RedisNames, clock_ms: Callable[[], float]) -> None:
        self._redis = redis
        self._key = names.canary_key()
        self._clock_ms = clock_ms
        self._config: CanaryConfig | None = None
        self._read_at = float("-inf")
        self._warned = False

    async def current(self) -> CanaryConfig | None:
        now = self._clock_ms()
        if now - self._read_at < REFRESH_MS:
            return self._config
        self._read_at = now
        try:
            self._config = parse_config(await self._redis.get(self._key))
            self._warned = False
        except (RedisError, msgspec.DecodeError, msgspec.ValidationError) as err:
            if not self._warned:
                log.warning("canary config unreadable (%s): serving control", err)
                self._warned = True
            self._config = None
        return self._config
