"""Run a blocking batch function on what queued up while it was busy: no linger, no timer.

The first item runs at once, alone. Items that arrive while a batch is in its thread wait
for it to finish and then go together, up to `max_batch` at a time. Under no load nothing
waits; under load the fixed cost of a call (a model's weights streamed once per batch) is
shared. Each caller awaits its own result; a batch that raises fails each of its callers
with that error; a caller that is cancelled leaves the others alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class Coalescing(Generic[In, Out]):
    def __init__(self, run_many: Callable[[list[In]], Sequence[Out]], max_batch: int = 16):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.run_many = run_many  # blocking: runs in a worker thread
        self.max_batch = max_batch
        self._pending: list[tuple[In, asyncio.Future[Out]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.batches = 0
        self.items = 0

    async def run(self, item: In) -> Out:
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            batch = [(item, future) for item, future in batch if not future.done()]
            if not batch:
                continue
            self.batches += 1
            self.items += len(batch)
            try:
                results = await asyncio.to_thread(self.run_many, [item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"{len(results)} results for a batch of {len(batch)}")
            except Exception as err:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(err)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
