"""How many images may be in prefill at once on one worker (the per-step compute budget).

Encoding images and prefilling their hundreds of feature tokens is the expensive part of a
multimodal request; the decode steps of every other stream wait behind it. A request takes
its images' worth of budget before it reaches the engine and gives it back at its first
token (prefill done): a 5-image request waits its turn instead of stalling everyone's
decode. First come, first served; a request larger than the whole budget runs alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class Grant:
    """Budget held by one request; `release` is idempotent."""

    def __init__(self, budget: ImageBudget, images: int) -> None:
        self._budget = budget
        self.images = images

    def release(self) -> None:
        if self.images:
            self._budget._give_back(self.images)
            self.images = 0


class ImageBudget:
    def __init__(self, max_images: int) -> None:
        self.max_images = max_images  # 0: no budget
        self.in_prefill = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, images: int) -> Grant:
        """Wait for `images` of budget; release the grant when prefill is done."""
        need = 0 if self.max_images == 0 else min(images, self.max_images)
        if need:
            await self._acquire(need)
        return Grant(self, need)

    @contextlib.asynccontextmanager
    async def prefill(self, images: int) -> AsyncIterator[None]:
        """Hold `images` of budget for the block."""
        grant = await self.acquire(images)
        try:
            yield
        finally:
            grant.release()

    def _give_back(self, need: int) -> None:
        self.in_prefill -= need
        self._wake()

    async def _acquire(self, need: int) -> None:
        if not self._waiters and self.in_prefill + need <= self.max_images:
            self.in_prefill += need
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((need, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.in_prefill -= need  # granted just as we were cancelled: give it back
                self._wake()
            else:
                self._waiters.remove((need, future))
                self._wake()  # those behind it may fit now
            raise

    def _wake(self) -> None:
        while self._waiters:
            need, future = self._waiters[0]
            if future.cancelled():
                self._waiters.popleft()
                continue
            if self.in_prefill + need > self.max_images:
                return
            self._waiters.popleft()
            self.in_prefill += need
            future.set_result(None)
