"""A pool's state board in Redis (hash `RedisNames.worker_states_key(pool)`, field = worker
id): each worker rewrites its entry every TURNSTREAM_WORKER_STATE_INTERVAL_MS and the router
reads the board to pick a worker (`schemas.worker_state`).

The writer does not know what a worker reports: the role hands it a function that builds
its `WorkerState` (an inference worker reports its engine batch and prefix cache, the image
worker only the turns it holds). The entry is removed when the worker stops, so a drained
worker gets no new turns; a crashed worker's entry goes stale and the router ignores it after
TURNSTREAM_WORKER_STATE_TTL_MS (the hash itself expires when a whole pool is gone). It never
costs a turn anything: one small write per interval, bounded by a timeout, failures logged
once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec
from aiokafka import AIOKafkaConsumer
from redis.asyncio import Redis

from schemas.worker_state import WorkerState, decode_state, encode_state

log = logging.getLogger("turnstream.state_board")


def owned_partitions(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The partitions of `topic` the consumer's group gives this worker now."""
    return sorted(tp.partition for tp in consumer.assignment() if tp.topic == topic)


class StateBoard:
    def __init__(
        self,
        *,
        redis: Redis,
        key: str,
        worker_id: str,
        state: Callable[[], WorkerState],
        interval_s: float,
        ttl_s: float,
    ) -> None:
        self.redis = redis
        self.key = key
        self.worker_id = worker_id
        self.state = state
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.written = 0
        self._failing = False

    async def run(self) -> None:
        """Write every interval until cancelled; then take the entry off the board."""
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.interval_s)
        finally:
            await self.leave()

    async def tick(self) -> None:
        try:
            async with asyncio.timeout(max(self.interval_s, 0.1)):
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hset(self.key, self.worker_id, encode_state(self.state()))
                    pipe.pexpire(self.key, int(self.ttl_s * 1000 * 10))
                    await pipe.execute()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if not self._failing:
                self._failing = True
                log.warning("worker state not written (%r); the router falls back", err)
            return
        self.written += 1
        if self._failing:
            self._failing = False
            log.info("writing worker state again")

    async def leave(self) -> None:
        try:
            async with asyncio.timeout(1.0):
                await self.redis.hdel(self.key, self.worker_id)
        except Exception as err:  # the entry goes stale instead
            log.info("could not take worker state off the board: %r", err)


async def read_states(redis: Redis, key: str, *, timeout_s: float = 0.2) -> list[WorkerState]:
    """Every decodable entry of a pool's board (an entry that does not decode, from a worker
    of another version or half-written, is skipped). Redis errors and timeouts propagate:
    the caller decides what an unreadable board means."""
    async with asyncio.timeout(timeout_s):
        raw = await redis.hgetall(key)
    states = []
    for worker, value in raw.items():
        try:
            states.append(decode_state(value.encode() if isinstance(value, str) else value))
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            log.warning("skipping the state of worker %r: %s", worker, err)
    return states
