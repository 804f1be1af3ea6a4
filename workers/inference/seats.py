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

A kept seat does not help when the engine's KV cache is full: vLLM admits a waiting request
only into free blocks, and preempts running ones only for a running request's growth. So
the low tiers may also be held to a KV budget (`low_kv`, in tokens): a turn says the most
cache it can take (its prompt and its longest answer, in whole blocks), and the turns below
`reserved_priority` together may not hold more than the budget (one alone always may);
the rest of the cache stays free for a higher tier's prompt. Checking the engine's KV use
instead did not help (measured: the running turns' answers grow into whatever was free).

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


def kv_need(prompt_tokens: int, max_tokens: int, block_size: int = 1) -> int:
    """The most KV-cache tokens a turn can take: its prompt and its longest answer, in the
    engine's whole blocks."""
    tokens = max(0, prompt_tokens) + max(0, max_tokens)
    block = max(1, block_size)
    return -(-tokens // block) * block


@dataclass(order=True)
class _Waiter:
    rank: tuple[int, int]  # (-priority, arrival): the heap's order
    priority: int = field(compare=False)
    seated: asyncio.Future[None] = field(compare=False)
    kv: int = field(compare=False, default=0)


class EngineSeats:
    def __init__(
        self,
        seats: int,
        *,
        reserved: int = 0,
        reserved_priority: int = 1,
        low_kv: int | None = None,
    ) -> None:
        """`low_kv`: KV-cache tokens the turns below `reserved_priority` may hold together
        (None: no budget)."""
        if seats < 1 or not 0 <= reserved < seats:
            raise ValueError(f"need 0 <= reserved ({reserved}) < seats ({seats})")
        self.seats = seats
        self.reserved = reserved
        self.reserved_priority = reserved_priority
        self.low_kv = low_kv
        self.low_kv_held = 0
        self.taken = 0
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(not w.seated.done() for w in self._waiting)

    def may_sit(self, priority: int, kv: int = 0) -> bool:
        """A free seat this priority may take now (the reserved ones only from
        `reserved_priority` up; below it, within the low tiers' KV budget)."""
        free = self.seats - self.taken
        if priority >= self.reserved_priority:
            return free > 0
        within = (
            self.low_kv is None or self.low_kv_held == 0 or self.low_kv_held + kv <= self.low_kv
        )
        return free > self.reserved and within

    @contextlib.asynccontextmanager
    async def seat(self, priority: int, kv: int = 0) -> AsyncIterator[None]:
        """Hold a seat for the block (waiting for one in turn); given back on exit, also
        when cancelled while waiting. `kv`: the most KV-cache tokens the turn can take."""
        low = kv if priority < self.reserved_priority else 0
        await self._take(priority, low)
        try:
            yield
        finally:
            self.taken -= 1
            self.low_kv_held -= low
            self._seat_waiters()

    async def _take(self, priority: int, kv: int) -> None:
        if not self._waiting and self.may_sit(priority, kv):
            self.taken += 1
            self.low_kv_held += kv
            return
        waiter = _Waiter((-priority, next(self._arrivals)), priority, asyncio.Future(), kv)
        heapq.heappush(self._waiting, waiter)
        self._seat_waiters()
        try:
            await waiter.seated
        except asyncio.CancelledError:
            if waiter.seated.done() and not waiter.seated.cancelled():
                self.taken -= 1  # seated as it was cancelled: the seat goes to the next
                self.low_kv_held -= kv
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
            if not self.may_sit(best.priority, best.kv):
                return
            heapq.heappop(self._waiting)
            self.taken += 1
            self.low_kv_held += best.kv
            best.seated.set_result(None)
