"""Wiring of the ClickHouse sink: `turns.completed` → table `turns` (migration 0001)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from infra.clickhouse.client import DEFAULT_DATABASE, connect
from infra.clickhouse.migrate import migrate
from schemas.events import TurnCompleted
from schemas.ids import make_instance_id
from schemas.settings import Settings
from schemas.topics import DEAD_LETTERS, TURNS_COMPLETED
from workers.runtime.kafka import make_consumer, make_producer
from workers.sink.batch import BatchLimits
from workers.sink.rows import TURN_COLUMNS, turn_row
from workers.sink.service import ClickHouseSink, TableSpec

CONSUMER_GROUP = "clickhouse-sink"


def _turn_row(event: Any, now: float) -> tuple | None:
    return turn_row(event, now_ms=now) if isinstance(event, TurnCompleted) else None


TURNS = TableSpec(
    table=f"{DEFAULT_DATABASE}.turns",
    columns=TURN_COLUMNS,
    row_of=_turn_row,
    stamp_index=TURN_COLUMNS.index("completed_at"),
)


@contextlib.asynccontextmanager
async def run_sink(settings: Settings, client: Any = None) -> AsyncIterator[ClickHouseSink]:
    """Migrate, then sink until the block ends (uncommitted work is re-read next time)."""
    client = client or connect(settings)
    await asyncio.to_thread(migrate, client)
    sink_id = make_instance_id("sink", settings.worker_id)
    topic = TURNS_COMPLETED.full_name(settings.namespace)
    consumer = make_consumer(
        settings.kafka_bootstrap, f"{topic}.{CONSUMER_GROUP}", sink_id, settings.fetch_max_wait_ms
    )
    producer = make_producer(settings.kafka_bootstrap, sink_id)
    await producer.start()
    await consumer.start()
    consumer.subscribe([topic])
    sink = ClickHouseSink(
        consumer=consumer,
        producer=producer,
        client=client,
        spec=TURNS,
        deadletter_topic=DEAD_LETTERS.full_name(settings.namespace),
        limits=BatchLimits(
            max_rows=settings.sink_batch_rows, linger_s=settings.sink_linger_ms / 1000
        ),
    )
    task = asyncio.create_task(sink.run(), name="sink")
    try:
        yield sink
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
        await producer.stop()
