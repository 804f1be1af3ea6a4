"""One asyncio lock per key (a conversation), created on demand and dropped when unused.

Turns of one conversation share a Kafka partition, so they reach the same worker; holding the
conversation's lock runs them one after another, in arrival order, while other
conversations proceed concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def users(self, key: str) -> int:
        """Holders plus waiters of the key's lock (how many turns a conversation has here)."""
        return self._users.get(key, 0)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                del self._locks[key]
