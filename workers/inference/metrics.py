"""The inference worker's metrics: its state as a `WorkerMetrics` on Kafka `workers.metrics`
every TURNSTREAM_METRICS_INTERVAL_MS, for the infrastructure monitoring layer (the ClickHouse
sink writes `worker_metrics`) and for load-aware routing.

Metrics must never cost a turn anything: the publisher runs in its own task, reads only
in-memory counts, and keeps at most one record on its way to the broker. While the broker
does not answer, samples are skipped (their counts roll into the next sample, which covers
the longer `interval_ms`) instead of piling up in the producer that also carries
`turns.completed`. Nothing but cancellation ends the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from schemas.codec import encode
from schemas.events import WorkerMetrics
from workers.inference.engine import Engine
from workers.inference.engine_stats import EngineSnapshot
from workers.inference.gauges import TurnGauges

log = logging.getLogger("turnstream.inference.metrics")


class MetricsPublisher:
    def __init__(
        self,
        *,
        engine: Engine,
        gauges: TurnGauges,
        producer: AIOKafkaProducer,
        topic: str,
        worker_id: str,
        pool: str,
        interval_s: float,
        clock_ms: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.gauges = gauges
        self.producer = producer
        self.topic = topic
        self.worker_id = worker_id
        self.pool = pool
        self.interval_s = interval_s
        self.clock_ms = clock_ms
        self.published = 0  # samples handed to the producer
        self.skipped = 0  # ticks that sent nothing (the previous record still unacknowledged)
        self.failed = 0  # samples the producer refused or lost
        self._base = (clock_ms(), engine.snapshot())  # the last published sample's time, counts
        self._pending: asyncio.Future | None = None
        self._failing = False

    def sample(self) -> tuple[WorkerMetrics, EngineSnapshot]:
        """The event for now (counters since the last published sample), and the engine's
        snapshot it was built from."""
        now = self.clock_ms()
        snapshot = self.engine.snapshot()
        since, base = self._base
        engine = snapshot.since(base)
        event = WorkerMetrics(
            worker_id=self.worker_id,
            pool=self.pool,
            model=self.engine.model_name,
            at_ms=now,
            interval_ms=max(0.0, now - since),
            running=engine.running,
            waiting=engine.waiting,
            kv_cache_usage=engine.kv_cache_usage,
            prefix_cache_queries=engine.prefix_cache_queries,
            prefix_cache_hits=engine.prefix_cache_hits,
            preemptions=engine.preemptions,
            prompt_tokens=engine.prompt_tokens,
            generation_tokens=engine.generation_tokens,
            queue_depth=self.gauges.queued,
            in_flight=self.gauges.held,
        )
        return event, snapshot

    async def run(self) -> None:
        """Publish every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick()

    async def tick(self) -> None:
        """Hand one sample to the producer, unless the last one is still on its way; never
        raises (a failure is logged once, and again when publishing recovers)."""
        if self._pending is not None and not self._pending.done():
            self.skipped += 1
            return
        try:
            event, snapshot = self.sample()
            # send() waits only for room and metadata; bounded, so a dead broker costs a
            # skipped sample, not a stuck task.
            async with asyncio.timeout(max(self.interval_s, 0.05)):
                self._pending = await self.producer.send(
                    self.topic, encode(event), key=self.worker_id.encode()
                )
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._failure(err)
            return
        self._base = (event.at_ms, snapshot)
        self.published += 1
        self._pending.add_done_callback(self._delivered)

    def _delivered(self, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        err = future.exception()
        if err is not None:
            self._failure(err)
        elif self._failing:
            self._failing = False
            log.info("publishing worker metrics again")

    def _failure(self, err: BaseException) -> None:
        self.failed += 1
        if not self._failing:
            self._failing = True
            log.warning("worker metrics not published (%r); turns are not affected", err)
