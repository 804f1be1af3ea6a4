"""A work queue in a Redis list, for work that is worthless after a short deadline.

Why not Kafka: an answer's safety windows (one per ~40 tokens) must be judged within the
stream's deadline (2 s) or not at all, so Kafka's durability buys nothing (a dead safety
worker's windows came back after the 30 s session timeout, long after their stream had
decided), while each record cost ~1 ms of client and broker CPU and a window was most of a
turn's records (docs/cost.md). Producers push (`push`: LPUSH, and LTRIM to `cap` so a queue
nobody pops stays bounded); each worker pops up to `batch` at a time (BLMPOP), at most
`max_inflight` handled at once. A popped item is handled once, by one worker; a worker
that dies loses what it held, and the stream's deadline decides for those (as it does for
a slow worker). What a worker cannot decode is logged and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import AnyEvent
from workers.runtime.draining import finish_or_cancel

log = logging.getLogger("turnstream.worker")

Handler = Callable[[AnyEvent], Awaitable[None]]
BLOCK_S = 1.0  # a pop waits this long for work, then looks again (a stop is seen at once)
RETRY_S = 1.0  # after Redis failed a pop


async def push(redis: Redis, key: str, payload: bytes, *, cap: int) -> None:
    """Queue one item; the queue keeps its newest `cap` (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(key, payload)
        pipe.ltrim(key, 0, cap - 1)
        await pipe.execute()


class WorkListLoop:
    """Pops the list `key` and hands each item to `handler`, `max_inflight` at once."""

    def __init__(
        self,
        redis: Redis,
        key: str,
        handler: Handler,
        *,
        max_inflight: int,
        batch: int = 16,
        on_failure: Callable[[AnyEvent, str], Awaitable[None]] | None = None,
    ) -> None:
        self.redis = redis
        self.key = key
        self.topics = [key]  # what it consumes, for the runner's log line
        self.handler = handler
        self.on_failure = on_failure
        self.batch = batch
        self._slots = asyncio.Semaphore(max_inflight)
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        while True:
            payloads = await self._pop()
            for payload in payloads:
                await self._slots.acquire()
                task = asyncio.create_task(self._process(payload))
                self._tasks.add(task)
                task.add_done_callback(self._done)

    async def drain(self, timeout_s: float) -> None:
        """Stop: let in-flight items finish (up to `timeout_s`), cancel the rest."""
        await finish_or_cancel(set(self._tasks), timeout_s)

    async def _pop(self) -> list[bytes]:
        try:
            popped = await self.redis.blmpop(
                BLOCK_S, 1, self.key, direction="RIGHT", count=self.batch
            )
        except RedisError as err:
            log.warning("popping %s failed: %r; again in %.0f s", self.key, err, RETRY_S)
            await asyncio.sleep(RETRY_S)
            return []
        if not popped:  # nothing within BLOCK_S
            return []
        _key, payloads = popped  # [key, [item, ...]] (redis-py types it loosely)
        return [p for p in payloads if isinstance(p, bytes)]

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _process(self, payload: bytes) -> None:
        try:
            event = decode(payload)
        except DecodeError as err:
            log.warning("dropping an undecodable item of %s: %s", self.key, err)
            return
        try:
            await self.handler(event)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # one item's failure never stops the loop
            log.exception("handling an item of %s failed", self.key)
            if self.on_failure is not None:
                with contextlib.suppress(Exception):
                    await self.on_failure(event, repr(err))
