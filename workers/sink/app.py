"""Wiring of the ClickHouse sink: `turns.completed` → table `turns`, `traces` → `traces`,
`feedback` → `feedback`, `workers.metrics` → `worker_metrics`, every event of a turn →
`events` (one consumer and batch stream per route, in one process that owns the embedded
engine)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime.cancelling import cancel_and_wait
from runtime.clickhouse.client import DEFAULT_DATABASE, connect
from runtime.clickhouse.migrate import migrate
from runtime.instance_id import make_instance_id
from runtime.settings import Settings
from schemas.events import FeedbackGiven, TraceRecorded, TurnCompleted, WorkerMetrics
from schemas.topics import (
    DEAD_LETTERS,
    FEEDBACK,
    SAFETY_VERDICTS,
    TRACES,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    TURNS_SUBMITTED,
    WORKERS_METRICS,
    TopicSpec,
    assembled_topics,
)
from schemas.traces import TRACE_COLUMNS
from workers.runtime.kafka import make_consumer, make_producer
from workers.sink.batch import BatchLimits
from workers.sink.event_log import EVENT_COLUMNS, event_rows
from workers.sink.rows import (
    FEEDBACK_COLUMNS,
    TURN_COLUMNS,
    WORKER_METRICS_COLUMNS,
    feedback_row,
    trace_row,
    turn_row,
    worker_metrics_row,
)
from workers.sink.service import ClickHouseSink, RowOf, TableSpec

CONSUMER_GROUP = "clickhouse-sink"


def route_group(namespace: str, route: str) -> str:
    """`[namespace.]clickhouse-sink.<route>`: a replay's namespace never shares offsets with
    live traffic."""
    group = f"{CONSUMER_GROUP}.{route}"
    return f"{namespace}.{group}" if namespace else group


def _only(kind: type, build: Callable[..., tuple]) -> RowOf:
    """The row of `kind` events (others on the route's topics are not for this table)."""
    return lambda event, now: [build(event, now_ms=now)] if isinstance(event, kind) else []


TURNS = TableSpec(
    table=f"{DEFAULT_DATABASE}.turns",
    columns=TURN_COLUMNS,
    row_of=_only(TurnCompleted, turn_row),
    stamp_index=TURN_COLUMNS.index("completed_at"),
)
TRACE_TABLE = TableSpec(
    table=f"{DEFAULT_DATABASE}.traces",
    columns=TRACE_COLUMNS,
    row_of=_only(TraceRecorded, trace_row),
    stamp_index=TRACE_COLUMNS.index("completed_at"),
)
FEEDBACK_TABLE = TableSpec(
    table=f"{DEFAULT_DATABASE}.feedback",
    columns=FEEDBACK_COLUMNS,
    row_of=_only(FeedbackGiven, feedback_row),
    stamp_index=FEEDBACK_COLUMNS.index("given_at"),
)
METRICS_TABLE = TableSpec(
    table=f"{DEFAULT_DATABASE}.worker_metrics",
    columns=WORKER_METRICS_COLUMNS,
    row_of=_only(WorkerMetrics, worker_metrics_row),
    stamp_index=WORKER_METRICS_COLUMNS.index("at"),
)
EVENTS_TABLE = TableSpec(
    table=f"{DEFAULT_DATABASE}.events",
    columns=EVENT_COLUMNS,
    row_of=lambda event, now: event_rows(event, now_ms=now),
    stamp_index=EVENT_COLUMNS.index("at"),
)
# every event of a turn, one route: a new event type's topic joins this tuple (the
# assembled turns are read from the pools' work queues: `turn_event_topics`)
TURN_EVENT_TOPICS = (
    TURNS_SUBMITTED,
    TURNS_ENRICHED,
    TURNS_COMPLETED,
    FEEDBACK,
    SAFETY_VERDICTS,
)
# route name → the topics it reads (one consumer group per route) and the table it fills
ROUTES: dict[str, tuple[tuple[TopicSpec, ...], TableSpec]] = {
    "turns": ((TURNS_COMPLETED,), TURNS),
    "traces": ((TRACES,), TRACE_TABLE),
    "feedback": ((FEEDBACK,), FEEDBACK_TABLE),
    "metrics": ((WORKERS_METRICS,), METRICS_TABLE),
    "events": (TURN_EVENT_TOPICS, EVENTS_TABLE),
}


def route_topics(name: str, pools: tuple[str, ...]) -> tuple[TopicSpec, ...]:
    """What a route reads; the events route also reads where the assembled turns are (the
    configured pools' work queues)."""
    topics = ROUTES[name][0]
    return (*topics, *assembled_topics(pools)) if name == "events" else topics


@contextlib.asynccontextmanager
async def run_sink(
    settings: Settings, client: Any = None, routes: tuple[str, ...] = tuple(ROUTES)
) -> AsyncIterator[dict[str, ClickHouseSink]]:
    """Migrate, then sink every route until the block ends (uncommitted work is re-read
    next time). Yields the sinks by route name (their stats)."""
    client = client or connect(settings)
    await asyncio.to_thread(migrate, client)
    sink_id = make_instance_id("sink", settings.worker_id)
    producer = make_producer(settings, sink_id)
    await producer.start()
    sinks: dict[str, ClickHouseSink] = {}
    consumers = []
    tasks = []
    try:
        for name in routes:
            spec = ROUTES[name][1]
            topics = [
                t.full_name(settings.namespace) for t in route_topics(name, settings.pool_names)
            ]
            consumer = make_consumer(
                settings,
                route_group(settings.namespace, name),
                sink_id,
                fetch_min_bytes=settings.sink_fetch_min_bytes,
            )
            await consumer.start()
            consumers.append(consumer)
            sinks[name] = ClickHouseSink(
                consumer=consumer,
                producer=producer,
                client=client,
                spec=spec,
                deadletter_topic=DEAD_LETTERS.full_name(settings.namespace),
                limits=BatchLimits(
                    max_rows=settings.sink_batch_rows, linger_s=settings.sink_linger_ms / 1000
                ),
            )
            consumer.subscribe(topics, listener=sinks[name].rebalance_listener())
            tasks.append(asyncio.create_task(sinks[name].run(), name=f"sink-{name}"))
        yield sinks
    finally:
        await cancel_and_wait(tasks)
        for consumer in consumers:
            await consumer.stop()
        await producer.stop()
