"""A connection's bounded queue of outgoing frames, drained by one writer task.

Relay events arrive from one shared Redis reader; a slow client must not stall it. Frames
queue here; a client that falls `limit` frames or `limit_bytes` bytes behind is disconnected
with an explicit close code (1013, try again later) instead of growing memory without
bound (bytes matter: one `response.done` can be a whole answer).
"""

from __future__ import annotations

import asyncio
from collections import deque


class OutboxOverflow(RuntimeError):
    pass


class Outbox:
    def __init__(self, limit: int = 10_000, limit_bytes: int = 4 * 1024 * 1024) -> None:
        self._frames: deque[tuple[str, str | None]] = deque()  # (frame, tag)
        self._limit = limit
        self._limit_bytes = limit_bytes
        self.queued_bytes = 0
        self._ready = asyncio.Event()
        self.closed = False

    def put(self, frame: str, tag: str | None = None) -> None:
        """Queue a frame; a `tag` (a turn's audio) lets `drop` remove it while queued."""
        if self.closed:
            return
        if len(self._frames) >= self._limit or self.queued_bytes + len(frame) > self._limit_bytes:
            raise OutboxOverflow(
                f"client is {len(self._frames)} frames ({self.queued_bytes} bytes) behind"
            )
        self._frames.append((frame, tag))
        self.queued_bytes += len(frame)
        self._ready.set()

    def drop(self, tag: str) -> int:
        """Remove the queued frames tagged `tag` (a barge-in's audio); how many went."""
        kept = deque(item for item in self._frames if item[1] != tag)
        dropped = len(self._frames) - len(kept)
        if dropped:
            self._frames = kept
            self.queued_bytes = sum(len(frame) for frame, _ in kept)
        return dropped

    async def take_all(self) -> list[str]:
        """Wait for at least one frame, then return everything queued."""
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        frames = [frame for frame, _ in self._frames]
        self._frames.clear()
        self.queued_bytes = 0
        return frames

    def __len__(self) -> int:
        return len(self._frames)
