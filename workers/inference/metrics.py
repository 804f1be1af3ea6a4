"""The inference worker's metrics: its state as a `WorkerMetrics` on Kafka `workers.metrics`
every TURNSTREAM_METRICS_INTERVAL_MS, for the infrastructure monitoring layer (the ClickHouse
sink writes `worker_metrics`) and for load-aware routing.

Metrics must never cost a turn anything: the publisher runs in its own task, reads only
in-memory counts, and keeps at most one record on its way to the broker (two for a moment
when an idle stretch ends, see below). While the broker does not answer, samples are skipped
(their counts roll into the next sample, which covers the longer `interval_ms`) instead of
piling up in the producer that also carries `turns.completed`. Nothing but cancellation
ends the task.

An idle worker publishes one sample when it becomes idle and then one every
`QUIET_HEARTBEAT_S`, not one every interval: idle samples were most of what the broker and the
sink handled with no traffic (five inserts a second into `worker_metrics` of nothing). No time
is lost from the table: a sample's `interval_ms` runs from the last published one, and when
work starts again the idle stretch is published first, then the busy sample for its own tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from runtime import prometheus as prom
from schemas.codec import encode
from schemas.events import TurnCompleted, WorkerMetrics
from workers.inference.engines.engine import Engine
from workers.inference.engines.engine_stats import EngineSnapshot
from workers.inference.gauges import TurnGauges

log = logging.getLogger("turnstream.inference.metrics")


def observe_completed(completed: TurnCompleted, pool: str) -> None:
    """A finished turn on the Prometheus endpoint: its latencies, tokens and outcome."""
    model, t = completed.model, completed.timings
    if t.ttft_ms is not None:
        prom.TIME_TO_FIRST_TOKEN.labels(pool, model).observe(t.ttft_ms / 1000)
    per_token = prom.TIME_PER_OUTPUT_TOKEN.labels(pool, model)
    for gap_ms in t.itl_ms:
        per_token.observe(gap_ms / 1000)
    finish = str(completed.finish_reason)
    prom.REQUEST_DURATION.labels(pool, model, finish).observe(t.e2e_ms / 1000)
    prom.TOKENS.labels(pool, model, "input").inc(completed.usage.prompt_tokens)
    prom.TOKENS.labels(pool, model, "output").inc(completed.usage.completion_tokens)
    prom.TURNS.labels("inference", pool, finish).inc()
    if completed.error is not None:
        prom.ERRORS.labels("inference", completed.error.code).inc()
    if completed.screening is not None and str(completed.screening.action) == "block":
        prom.SAFETY_TRIGGERS.labels("input", "block").inc()
    checked = completed.output_safety
    if checked is not None and checked.cut_window >= 0:
        prom.SAFETY_TRIGGERS.labels("output", "cut").inc()


def export_gauges(event: WorkerMetrics) -> None:
    """The sample's gauges on the Prometheus endpoint too (each sample: they are "now")."""
    labels = (event.model, event.pool, event.worker_id)
    prom.ENGINE_RUNNING.labels(*labels).set(event.running)
    prom.ENGINE_WAITING.labels(*labels).set(event.waiting)
    prom.KV_CACHE_USAGE.labels(*labels).set(event.kv_cache_usage)
    prom.QUEUE_DEPTH.labels("inference", event.pool).set(event.queue_depth)
    prom.IN_FLIGHT.labels("inference", event.pool).set(event.in_flight)


def export_counts(event: WorkerMetrics) -> None:
    """The sample's counts, once it is published (its interval then closes: none is counted
    twice, and a sample skipped while Kafka is away rolls into the next)."""
    hits = event.prefix_cache_hits
    prom.PREFIX_CACHE.labels(event.pool, "hit").inc(hits)
    prom.PREFIX_CACHE.labels(event.pool, "miss").inc(max(0, event.prefix_cache_queries - hits))


QUIET_HEARTBEAT_S = 10.0  # an idle worker still publishes this often (it is alive)


def is_idle(event: WorkerMetrics) -> bool:
    """Nothing running, waiting, queued or held, and nothing counted in the interval."""
    busy = (
        event.running,
        event.waiting,
        event.queue_depth,
        event.in_flight,
        event.prompt_tokens,
        event.generation_tokens,
        event.prefix_cache_queries,
        event.preemptions,
    )
    return not any(busy)


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
        self.quiet = 0  # idle ticks held back (the worker idle, and idle when last published)
        self._quiet: tuple[WorkerMetrics, EngineSnapshot] | None = None  # the latest of them
        self._last_idle = False

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
        export_gauges(event)
        return event, snapshot

    async def run(self) -> None:
        """Publish every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick()

    async def tick(self) -> None:
        """Hand one sample to the producer, unless the last one is still on its way or the
        worker stays idle (see `QUIET_HEARTBEAT_S`); never raises (a failure is logged once,
        and again when publishing recovers)."""
        if self._pending is not None and not self._pending.done():
            self.skipped += 1
            return
        sampled = self._sample_or_fail()
        if sampled is None:
            return
        event, snapshot = sampled
        if is_idle(event) and self._last_idle:
            if event.at_ms - self._base[0] < QUIET_HEARTBEAT_S * 1000:
                self._quiet = (event, snapshot)  # nothing new: held back
                self.quiet += 1
                return
        elif self._quiet is not None:
            # the idle stretch up to the last quiet tick first, so the busy sample's
            # interval holds only busy time
            if not await self._publish(*self._quiet):
                return
            sampled = self._sample_or_fail()
            if sampled is None:
                return
            event, snapshot = sampled
        await self._publish(event, snapshot)

    def _sample_or_fail(self) -> tuple[WorkerMetrics, EngineSnapshot] | None:
        """`sample()`, or None with the failure counted (a broken engine costs a sample)."""
        try:
            return self.sample()
        except Exception as err:
            self._failure(err)
            return None

    async def _publish(self, event: WorkerMetrics, snapshot: EngineSnapshot) -> bool:
        try:
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
            return False
        self._base = (event.at_ms, snapshot)
        self._quiet = None
        self._last_idle = is_idle(event)
        export_counts(event)
        self.published += 1
        self._pending.add_done_callback(self._delivered)
        return True

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
