"""The worker's entry on its pool's state board in Redis: what the router reads to pick a
worker (`schemas.worker_state`), rewritten every TURNSTREAM_WORKER_STATE_INTERVAL_MS.

The entry says which partitions of the pool's topic this worker's consumer owns now, so
after a rebalance the router follows within one interval. It is removed when the worker
stops, so a drained worker gets no new turns; a crashed worker's entry goes stale and the
router ignores it after TURNSTREAM_WORKER_STATE_TTL_MS (the hash itself expires when a
whole pool is gone). Like the metrics, it never costs a turn anything: one small write per
interval, bounded by a timeout, failures logged once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from redis.asyncio import Redis

from schemas.worker_state import WorkerState, encode_state
from workers.inference.engine import Engine
from workers.inference.service import InferenceService

log = logging.getLogger("turnstream.inference.state")


class StateBoard:
    def __init__(
        self,
        *,
        redis: Redis,
        key: str,
        service: InferenceService,
        engine: Engine,
        consumer: AIOKafkaConsumer,
        topic: str,
        worker_id: str,
        pool: str,
        capacity: int,
        interval_s: float,
        ttl_s: float,
        clock_ms: Callable[[], float],
    ) -> None:
        self.redis = redis
        self.key = key
        self.service = service
        self.engine = engine
        self.consumer = consumer
        self.topic = topic
        self.worker_id = worker_id
        self.pool = pool
        self.capacity = capacity
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self.clock_ms = clock_ms
        self.written = 0
        self._failing = False

    def state(self) -> WorkerState:
        engine = self.engine.snapshot()
        partitions = sorted(
            tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic
        )
        return WorkerState(
            worker_id=self.worker_id,
            pool=self.pool,
            at_ms=self.clock_ms(),
            partitions=partitions,
            capacity=self.capacity,
            running=engine.running,
            waiting=engine.waiting,
            queue_depth=self.service.gauges.queued,
            in_flight=self.service.gauges.held,
            kv_cache_usage=engine.kv_cache_usage,
            prefilling_tokens=self.service.prefilling_tokens,
            prefixes=self.service.prefixes.summary(),
        )

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
