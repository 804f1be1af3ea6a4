"""A connection's bounded queue of outgoing frames, drained by one writer task.

Relay events arrive from one shared Redis reader; a slow client must not stall it. Frames
queue here; a client that falls `limit` frames behind is disconnected with an explicit
close code (1013, try again later) instead of growing memory without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque


class OutboxOverflow(RuntimeError):
    pass


class Outbox:
    def __init__(self, limit: int = 10_000) -> None:
        self._frames: deque[str] = deque()
        self._limit = limit
        self._ready = asyncio.Event()
        self.closed = False

    def put(self, frame: str) -> None:
        if self.closed:
            return
        if len(self._frames) >= self._limit:
            raise OutboxOverflow(f"client is {len(self._frames)} frames behind")
        self._frames.append(frame)
        self._ready.set()

    async def take_all(self) -> list[str]:
        """Wait for at least one frame, then return everything queued."""
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        frames = list(self._frames)
        self._frames.clear()
        return frames

    def __len__(self) -> int:
        return len(self._frames)
