"""Publishing frames to the edges over Redis pub/sub, batched without adding latency.

One awaited PUBLISH per token caps near 7k msgs/s per connection (DESIGN.md §3). Instead,
frames queue in memory and a single sender task ships everything queued in one pipelined
round trip, one message per edge channel holding all of that edge's frames (a JSON array,
`schemas.codec.encode_batch`); while a round trip is in flight the next batch builds up
("natural batching"): no timer, so an idle system sends each frame at once and a busy one
sends bigger batches. Order is preserved per process, so a turn's frames arrive in order.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from schemas.codec import encode, encode_batch
from schemas.events import Event

log = logging.getLogger("turnstream.relay")


class RelayOverflow(RuntimeError):
    """More frames are queued than the relay may hold (Redis down for too long)."""


class RelayFailed(RuntimeError):
    """Redis refused a batch for good (not an outage)."""


class RelayPublisher:
    def __init__(self, redis: Redis, *, max_pending: int = 100_000) -> None:
        self._redis = redis
        self._pending: list[tuple[str, bytes, asyncio.Future[None] | None]] = []
        self._max_pending = max_pending
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def publish(self, channel: str, event: Event) -> None:
        """Queue a frame (token chunks: losing one to a crash is repaired by redelivery)."""
        self._enqueue(channel, event, None)

    async def publish_confirmed(self, channel: str, event: Event) -> None:
        """Queue a frame and wait until Redis took it (terminal frames: the turn's offset
        must not be committed while its `turn.completed` exists only in this process)."""
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(channel, event, confirmed)
        await confirmed

    def _enqueue(self, channel: str, event: Event, confirmed: asyncio.Future[None] | None):
        if len(self._pending) >= self._max_pending:
            raise RelayOverflow(f"{len(self._pending)} frames waiting for Redis")
        self._pending.append((channel, encode(event), confirmed))
        self._idle.clear()
        self._wakeup.set()

    async def flushed(self) -> None:
        """Wait until every frame queued so far has been handed to Redis."""
        await self._idle.wait()

    async def run(self) -> None:
        backoff = 0.05
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for channel, payloads in _by_channel(batch).items():
                            pipe.publish(channel, encode_batch(payloads))
                        await pipe.execute()
                except (RedisConnectionError, RedisTimeoutError):  # Redis away: keep, retry
                    log.warning("relay publish failed; retrying in %.2fs", backoff, exc_info=True)
                    self._pending[:0] = batch
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                except Exception as err:  # a permanent error: retrying would loop forever
                    log.exception("relay dropped %d frames", len(batch))
                    for _, _, confirmed in batch:
                        if confirmed is not None and not confirmed.done():
                            confirmed.set_exception(RelayFailed(repr(err)))
                    continue
                backoff = 0.05
                for _, _, confirmed in batch:
                    if confirmed is not None and not confirmed.done():
                        confirmed.set_result(None)
            self._idle.set()


def _by_channel(batch: list[tuple[str, bytes, object]]) -> dict[str, list[bytes]]:
    grouped: dict[str, list[bytes]] = {}
    for channel, payload, _ in batch:
        grouped.setdefault(channel, []).append(payload)
    return grouped
