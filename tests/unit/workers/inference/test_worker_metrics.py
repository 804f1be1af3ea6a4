"""Worker metrics without services: folding engine stats, the turn gauges, the fake engine's
books, the publisher (intervals, a broker that does not answer, stopping), the sink's row
checks."""

from __future__ import annotations

import asyncio
import math

import pytest
from aiokafka.errors import KafkaConnectionError

from harness.polling import eventually
from schemas.codec import decode, encode
from schemas.events import DecodingParams, Message, Role, WorkerMetrics
from schemas.ids import now_ms
from schemas.topics import REGISTRY, WORKERS_METRICS
from workers.inference.engines.engine import GenerationRequest
from workers.inference.engines.engine_stats import EngineMeter, EngineSnapshot
from workers.inference.engines.fake_engine import FakeEngine
from workers.inference.gauges import TurnGauges
from workers.inference.metrics import QUIET_HEARTBEAT_S, MetricsPublisher
from workers.sink.rows import WORKER_METRICS_COLUMNS, RowRejected, worker_metrics_row

# ---- folding engine stats ---------------------------------------------------------------


def test_the_meter_keeps_the_latest_gauges_and_adds_up_counters():
    meter = EngineMeter()
    meter.scheduler_step(running=3, waiting=2, kv_cache_usage=0.5, prefix_queries=100)
    meter.iteration(prompt_tokens=80, generation_tokens=3, preemptions=0)
    meter.scheduler_step(
        running=4, waiting=0, kv_cache_usage=0.6, prefix_queries=50, prefix_hits=40
    )
    meter.iteration(prompt_tokens=10, generation_tokens=4, preemptions=1)
    assert meter.snapshot() == EngineSnapshot(
        running=4,
        waiting=0,
        kv_cache_usage=0.6,
        prefix_cache_queries=150,
        prefix_cache_hits=40,
        preemptions=1,
        prompt_tokens=90,
        generation_tokens=7,
    )


def test_the_meter_keeps_usage_in_range_and_ignores_negative_counts():
    meter = EngineMeter()
    meter.scheduler_step(running=-1, waiting=0, kv_cache_usage=1.0000001, prefix_queries=-5)
    meter.iteration(prompt_tokens=-3, generation_tokens=2, preemptions=0)
    snap = meter.snapshot()
    assert snap.kv_cache_usage == 1.0 and snap.running == 0
    assert snap.prefix_cache_queries == 0 and snap.prompt_tokens == 0
    assert snap.generation_tokens == 2


def test_an_interval_has_the_latest_gauges_and_the_growth_of_counters():
    earlier = EngineSnapshot(running=9, kv_cache_usage=0.9, prefix_cache_queries=100,
                             prefix_cache_hits=10, generation_tokens=50)  # fmt: skip
    later = EngineSnapshot(running=2, kv_cache_usage=0.2, prefix_cache_queries=300,
                           prefix_cache_hits=160, generation_tokens=80)  # fmt: skip
    interval = later.since(earlier)
    assert (interval.running, interval.kv_cache_usage) == (2, 0.2)
    assert (interval.prefix_cache_queries, interval.prefix_cache_hits) == (200, 150)
    assert interval.generation_tokens == 30 and interval.prefix_cache_hit_rate == 0.75
    assert EngineSnapshot().prefix_cache_hit_rate is None


def test_a_counter_going_down_means_a_restart_and_counts_whole():
    earlier = EngineSnapshot(generation_tokens=500, prompt_tokens=100)
    restarted = EngineSnapshot(generation_tokens=20, prompt_tokens=300)
    assert restarted.since(earlier) == restarted


# ---- the worker's own gauges ------------------------------------------------------------


def test_a_turn_is_queued_until_it_starts_and_held_until_it_ends():
    gauges = TurnGauges()
    with gauges.hold() as first, gauges.hold():
        assert (gauges.held, gauges.queued) == (2, 2)
        first.started()
        first.started()  # idempotent
        assert (gauges.held, gauges.queued) == (2, 1)
    assert (gauges.held, gauges.queued) == (0, 0)
    with pytest.raises(RuntimeError), gauges.hold():
        raise RuntimeError("the turn failed before it started")
    assert (gauges.held, gauges.queued) == (0, 0)


def request(text: str, max_tokens: int = 256) -> GenerationRequest:
    return GenerationRequest("r1", [Message(Role.USER, text)], DecodingParams(max_tokens))


async def test_the_fake_engine_reports_its_own_books():
    engine = FakeEngine(token_interval_s=0, kv_capacity_tokens=100)
    stream = engine.stream(request("one two three"))
    await anext(stream)
    during = engine.snapshot()
    assert during.running == 1 and during.generation_tokens == 1
    assert during.prompt_tokens == 3 + 4  # words + 4 per message, as it counts them
    assert during.kv_cache_usage == pytest.approx((7 + 1) / 100)
    rest = [d async for d in stream]
    after = engine.snapshot()
    assert after.running == 0 and after.kv_cache_usage == 0
    assert after.generation_tokens == 1 + len(rest)


# ---- the publisher ----------------------------------------------------------------------


class Producer:
    """Records what is sent; `acks` decides what each delivery does (default: acked)."""

    def __init__(self, acks: str = "ok") -> None:
        self.acks = acks
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.futures: list[asyncio.Future] = []

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future:
        if self.acks == "refuse":
            raise KafkaConnectionError("broker down")
        if self.acks == "block":  # waiting for metadata from a broker that never answers
            await asyncio.Event().wait()
        self.sent.append((topic, value, key))
        future = asyncio.get_running_loop().create_future()
        if self.acks == "ok":
            future.set_result(None)
        self.futures.append(future)
        return future


class Clock:
    """Moves 500 ms at every tick of the test's publisher."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000.0

    def __call__(self) -> float:
        return self.now


class Ticking(MetricsPublisher):
    async def tick(self) -> None:
        self.clock_ms.now += 500  # type: ignore[attr-defined]
        await super().tick()


def publisher(engine, producer, gauges=None, interval_s: float = 0.01) -> MetricsPublisher:
    return Ticking(
        engine=engine,
        gauges=gauges or TurnGauges(),
        producer=producer,  # type: ignore[arg-type]
        topic="ns.workers.metrics",
        worker_id="inference-w1",
        pool="inference",
        interval_s=interval_s,
        clock_ms=Clock(),
    )


def sent_events(producer: Producer) -> list[WorkerMetrics]:
    events = [decode(value) for _, value, _ in producer.sent]
    assert all(isinstance(e, WorkerMetrics) for e in events)
    return events  # type: ignore[return-value]


class Engine:
    model_name = "m"

    def __init__(self) -> None:
        self.state = EngineSnapshot()

    def snapshot(self) -> EngineSnapshot:
        return self.state


async def test_each_sample_carries_gauges_and_the_counts_of_its_interval():
    engine, producer, gauges = Engine(), Producer(), TurnGauges()
    pub = publisher(engine, producer, gauges)
    engine.state = EngineSnapshot(running=2, waiting=1, kv_cache_usage=0.4, generation_tokens=10)
    with gauges.hold(), gauges.hold() as started:
        started.started()
        await pub.tick()
    engine.state = EngineSnapshot(running=0, kv_cache_usage=0.0, generation_tokens=25)
    await pub.tick()
    first, second = sent_events(producer)
    assert (first.running, first.waiting, first.kv_cache_usage) == (2, 1, 0.4)
    assert (first.queue_depth, first.in_flight, first.generation_tokens) == (1, 2, 10)
    assert (second.queue_depth, second.in_flight, second.generation_tokens) == (0, 0, 15)
    assert second.at_ms - first.at_ms == second.interval_ms == 500
    assert first.turn_id == "" and first.worker_id == "inference-w1" and first.model == "m"
    assert {(topic, key) for topic, _, key in producer.sent} == {
        ("ns.workers.metrics", b"inference-w1")
    }


async def test_an_idle_worker_publishes_when_it_goes_idle_then_a_heartbeat():
    engine, producer = Engine(), Producer()
    pub = publisher(engine, producer)
    engine.state = EngineSnapshot(running=1, generation_tokens=10)
    await pub.tick()  # busy
    engine.state = EngineSnapshot(generation_tokens=10)
    await pub.tick()  # idle now: published (the transition)
    ticks = int(QUIET_HEARTBEAT_S * 1000 / 500)
    for _ in range(ticks - 1):
        await pub.tick()
    assert len(producer.sent) == 2 and pub.quiet == ticks - 1
    await pub.tick()  # QUIET_HEARTBEAT_S since the last one: a heartbeat
    busy, idle, beat = sent_events(producer)
    assert (busy.running, idle.running, idle.generation_tokens) == (1, 0, 0)
    assert beat.interval_ms == QUIET_HEARTBEAT_S * 1000 and beat.generation_tokens == 0


async def test_work_after_an_idle_stretch_loses_no_time_and_no_counts():
    engine, producer = Engine(), Producer()
    pub = publisher(engine, producer)
    start = pub.clock_ms()
    for _ in range(6):  # idle from the start: the first is published, five held back
        await pub.tick()
    engine.state = EngineSnapshot(running=2, generation_tokens=7)
    await pub.tick()
    engine.state = EngineSnapshot(running=2, generation_tokens=19)
    await pub.tick()
    first, stretch, busy, busier = sent_events(producer)
    assert (stretch.running, stretch.interval_ms) == (0, 5 * 500)  # the held-back ticks
    assert (busy.running, busy.interval_ms, busy.generation_tokens) == (2, 500, 7)
    assert busier.generation_tokens == 12
    total = sum(e.interval_ms for e in (first, stretch, busy, busier))
    assert total == pub.clock_ms() - start  # every millisecond is in some sample


async def test_an_unanswering_broker_holds_one_record_and_loses_no_counts():
    engine, producer = Engine(), Producer(acks="never")
    pub = publisher(engine, producer)
    engine.state = EngineSnapshot(generation_tokens=5)
    await pub.tick()
    for tokens in (7, 9, 12):  # the broker is silent: nothing more piles up
        engine.state = EngineSnapshot(generation_tokens=tokens)
        await pub.tick()
    assert len(producer.sent) == 1 and pub.skipped == 3
    producer.futures[0].set_result(None)  # it answers again
    await pub.tick()
    first, second = sent_events(producer)
    assert first.generation_tokens == 5 and second.generation_tokens == 7  # 12 - 5
    assert second.interval_ms == 4 * 500  # the skipped ticks' time is in it


async def test_a_refusing_broker_is_survived_and_the_counts_roll_over():
    engine, producer = Engine(), Producer(acks="refuse")
    pub = publisher(engine, producer)
    engine.state = EngineSnapshot(prompt_tokens=40)
    await pub.tick()
    await pub.tick()
    assert pub.failed == 2 and not producer.sent
    producer.acks = "ok"
    await pub.tick()
    [event] = sent_events(producer)
    assert event.prompt_tokens == 40


async def test_a_broker_that_never_answers_metadata_costs_a_sample_not_the_task():
    engine, producer = Engine(), Producer(acks="block")
    pub = publisher(engine, producer, interval_s=0.01)
    await asyncio.wait_for(pub.tick(), 30)  # guard only: tick gives up by itself
    assert pub.failed == 1 and not producer.sent


async def test_the_publisher_runs_until_cancelled_and_stops_at_once():
    engine, producer = Engine(), Producer(acks="never")
    pub = publisher(engine, producer, interval_s=0.001)
    task = asyncio.create_task(pub.run())
    await eventually(lambda: pub.skipped >= 3, every_s=0.001)  # one record pending, ticking on
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_failing_engine_snapshot_does_not_end_the_publisher():
    class Broken(Engine):
        def snapshot(self) -> EngineSnapshot:
            if self.broken:
                raise RuntimeError("no stats")
            return self.state

    engine, producer = Broken(), Producer()
    engine.broken = False
    pub = publisher(engine, producer)
    engine.broken = True
    await pub.tick()
    assert pub.failed == 1 and not producer.sent


# ---- the event, its topic, the sink's row ----------------------------------------------


def metrics(**fields) -> WorkerMetrics:
    values = {
        "worker_id": "inference-w1",
        "pool": "inference",
        "model": "m",
        "at_ms": now_ms(),
        "interval_ms": 500.0,
        "running": 3,
        "waiting": 1,
        "kv_cache_usage": 0.25,
        "prefix_cache_queries": 100,
        "prefix_cache_hits": 60,
        "generation_tokens": 30,
        "queue_depth": 2,
        "in_flight": 5,
    }
    return WorkerMetrics(**{**values, **fields})


def test_the_event_round_trips_and_has_its_topic():
    event = metrics()
    assert decode(encode(event)) == event
    assert WORKERS_METRICS in REGISTRY and WORKERS_METRICS.key == "worker_id"


def test_a_metrics_row_in_column_order():
    event = metrics()
    row = dict(zip(WORKER_METRICS_COLUMNS, worker_metrics_row(event, now_ms=now_ms()), strict=True))
    assert row["worker_id"] == "inference-w1" and row["running"] == 3
    assert row["kv_cache_usage"] == 0.25 and row["queue_depth"] == 2 and row["in_flight"] == 5
    assert row["prefix_cache_hits"] == 60 and row["at"].timestamp() * 1000 == pytest.approx(
        event.at_ms, abs=1
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"kv_cache_usage": 1.5}, "outside 0..1"),
        ({"kv_cache_usage": -0.1}, "outside 0..1"),
        ({"kv_cache_usage": math.nan}, "outside 0..1"),
        ({"running": -1}, "negative or overflowing counts: running"),
        ({"queue_depth": -2}, "queue_depth"),
        ({"generation_tokens": 2**40}, "generation_tokens"),
        ({"prefix_cache_hits": 101}, "more prefix-cache hits"),
        ({"interval_ms": -1.0}, "interval_ms"),
        ({"at_ms": 1000.0}, "plausible time"),
        ({"worker_id": ""}, "no worker_id"),
    ],
)
def test_absurd_samples_are_rejected_with_the_reason(fields, says):
    with pytest.raises(RowRejected, match=says):
        worker_metrics_row(metrics(**fields), now_ms=now_ms())


async def test_a_snapshot_failing_after_an_idle_stretch_costs_a_sample_not_the_task():
    class FailsOnce(Engine):
        calls_left: int | None = None

        def snapshot(self) -> EngineSnapshot:
            if self.calls_left is not None:
                self.calls_left -= 1
                if self.calls_left < 0:
                    self.calls_left = None
                    raise RuntimeError("no stats")
            return self.state

    engine, producer = FailsOnce(), Producer()
    pub = publisher(engine, producer)
    for _ in range(3):  # idle: one published, two held back
        await pub.tick()
    engine.state = EngineSnapshot(running=1, generation_tokens=4)
    engine.calls_left = 1  # the busy tick's first snapshot works, the one after the stretch fails
    await pub.tick()
    assert pub.failed == 1 and len(producer.sent) == 2  # the first idle one and the stretch
    await pub.tick()  # and it goes on
    assert sent_events(producer)[-1].running == 1
