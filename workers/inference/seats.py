"""The engine's batch seats, handed out by tier.

vLLM's priority scheduling only reorders requests waiting inside the engine, and it never
preempts a running request to make room for a higher priority one (only to free KV-cache
blocks). A worker that fills every seat of the engine's batch with free-tier turns makes an
enterprise turn wait for one of them to end: seconds. So the worker hands the seats out
itself: a turn takes a seat before its request goes to the engine; waiting turns are seated
highest priority first, then in arrival order; and turns below `reserved_priority` may not
take the last `reserved` seats, which stay free for a higher tier's turn to start at the
engine's next step. The worker fetches more turns than there are seats (they wait here, not
in Kafka, where arrival order is all there is).

Pure asyncio, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

UNLIMITED = 1 << 30  # seats of a gate that never makes a turn wait (no batch limit known)


@dataclass(order=True)
class _Waiter:
    rank: tuple[int, int]  # (-priority, arrival): the heap's order
    priority: int = field(compare=False)
    seated: asyncio.Future[None] = field(compare=False)


class EngineSeats:
    def __init__(self, seats: int, *, reserved: int = 0, reserved_priority: int = 1) -> None:
        if seats < 1 or not 0 <= reserved < seats:
            raise ValueError(f"need 0 <= reserved ({reserved}) < seats ({seats})")
        self.seats = seats
        self.reserved = reserved
        self.reserved_priority = reserved_priority
        self.taken = 0
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(not w.seated.done() for w in self._waiting)

    def may_sit(self, priority: int) -> bool:
        """A free seat this priority may take now (the reserved ones only from
        `reserved_priority` up)."""
        free = self.seats - self.taken
        return free > (0 if priority >= self.reserved_priority else self.reserved)

    @contextlib.asynccontextmanager
    async def seat(self, priority: int) -> AsyncIterator[None]:
        """Hold a seat for the block (waiting for one in turn); given back on exit, also
        when cancelled while waiting."""
        await self._take(priority)
        try:
            yield
        finally:
            self.taken -= 1
            self._seat_waiters()

    async def _take(self, priority: int) -> None:
        if not self._waiting and self.may_sit(priority):
            self.taken += 1
            return
        waiter = _Waiter((-priority, next(self._arrivals)), priority, asyncio.Future())
        heapq.heappush(self._waiting, waiter)
        self._seat_waiters()
        try:
            await waiter.seated
        except asyncio.CancelledError:
            if waiter.seated.done() and not waiter.seated.cancelled():
                self.taken -= 1  # seated as it was cancelled: the seat goes to the next
            self._drop(waiter)
            self._seat_waiters()
            raise

    def _drop(self, waiter: _Waiter) -> None:
        with contextlib.suppress(ValueError):
            self._waiting.remove(waiter)
            heapq.heapify(self._waiting)

    def _seat_waiters(self) -> None:
        """Seat the best waiters while the best may sit (when it may not, no one after it
        may: they are of its priority or lower)."""
        while self._waiting:
            best = self._waiting[0]
            if best.seated.done():  # cancelled, not removed yet
                heapq.heappop(self._waiting)
                continue
            if not self.may_sit(best.priority):
                return
            heapq.heappop(self._waiting)
            self.taken += 1
            best.seated.set_result(None)
