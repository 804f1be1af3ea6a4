"""A connection's bounded queue of outgoing frames, drained by one writer task.

Relay events arrive from one shared Redis reader; a slow client must not stall it. Frames
queue here; a client that falls `limit` frames or `limit_bytes` bytes behind is disconnected
with an explicit close code (1013, try again later) instead of growing memory without
bound (bytes matter: one `response.done` can be a whole answer).

Coalescing: a text delta queued right behind a delta of the same turn that the writer has
not taken yet joins it (one frame, the texts concatenated, the first one's `seq`: an
answer's first frame is always seq 0, and a skipped seq means frames were joined; the
position is the last one's, where a resume continues). Deltas
that reach the edge in one relay batch (a fast engine) are joined as well; a reader that
falls behind gets fewer, bigger frames, so a slow reader costs one pending frame per answer
instead of one per token, and only a reader that stops altogether reaches the bound. Both
doors join deltas so: the WebSocket's frames and the HTTP door's SSE chunks (each door
renders the joined delta on its own wire; an SSE chunk keeps the last delta's id).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from ws_edge.errors import EdgeError
from ws_edge.messages import ResponseDelta, encode_server


class OutboxOverflow(EdgeError, RuntimeError):
    """More frames wait for a slow client than its outbox may hold."""

    code = "slow_consumer"


class Outbox:
    def __init__(self, limit: int = 10_000, limit_bytes: int = 4 * 1024 * 1024) -> None:
        self._frames: deque[tuple[str, str | None]] = deque()  # (frame, tag)
        self._limit = limit
        self._limit_bytes = limit_bytes
        self.queued_bytes = 0
        self._ready = asyncio.Event()
        self.closed = False
        self._tail_delta: ResponseDelta | None = None  # the last queued frame, if a delta
        self.coalesced = 0  # deltas merged into the one before them

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
        self._tail_delta = None
        self._ready.set()

    def put_delta(
        self, delta: ResponseDelta, render: Callable[[ResponseDelta], str] = encode_server
    ) -> None:
        """Queue a text delta, merged into the queued one before it when that is the same
        turn's (the writer is behind). `render`: the delta's frame on this door's wire (the
        WebSocket's JSON frame by default, an SSE chunk on the HTTP door)."""
        previous = self._tail_delta
        if (
            self.closed
            or previous is None
            or previous.turn_id != delta.turn_id
            or previous.epoch != delta.epoch
        ):
            self.put(render(delta))
            self._tail_delta = delta
            return
        merged = ResponseDelta(
            delta.turn_id, previous.seq, previous.text + delta.text, delta.epoch, delta.offset
        )
        frame = render(merged)
        old, tag = self._frames.pop()
        self.queued_bytes -= len(old)
        if self.queued_bytes + len(frame) > self._limit_bytes:
            self._frames.append((old, tag))
            self.queued_bytes += len(old)
            raise OutboxOverflow(
                f"client is {len(self._frames)} frames ({self.queued_bytes} bytes) behind"
            )
        self._frames.append((frame, tag))
        self.queued_bytes += len(frame)
        self._tail_delta = merged
        self.coalesced += 1

    def drop(self, tag: str) -> int:
        """Remove the queued frames tagged `tag` (a barge-in's audio); how many went."""
        kept = deque(item for item in self._frames if item[1] != tag)
        dropped = len(self._frames) - len(kept)
        if dropped:
            self._frames = kept
            self.queued_bytes = sum(len(frame) for frame, _ in kept)
            self._tail_delta = None  # the tail may have changed: no merge into it
        return dropped

    async def take_all(self) -> list[str]:
        """Wait for at least one frame, then return everything queued."""
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        frames = [frame for frame, _ in self._frames]
        self._frames.clear()
        self.queued_bytes = 0
        self._tail_delta = None
        return frames

    def __len__(self) -> int:
        return len(self._frames)
