"""What the system itself recorded of the turns: every `turn.completed` in Kafka
`turns.completed`, and the rows of ClickHouse `traces` (through the sink's HTTP interface,
which holds the embedded engine while the sink runs: `analyst_client`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Collection

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.faults.books import Completion
from runtime.clickhouse.client import DEFAULT_DATABASE, analyst_client
from runtime.kafka_ranges import partitions_of
from runtime.settings import Settings
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import TurnCompleted
from schemas.topics import TURNS_COMPLETED


async def completions(settings: Settings) -> dict[str, list[Completion]]:
    """Every turn.completed recorded so far, by turn id (the whole topic: it is this run's)."""
    topic = TURNS_COMPLETED.full_name(settings.namespace)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    found: dict[str, list[Completion]] = defaultdict(list)
    try:
        numbers = sorted(await partitions_of(consumer, topic))
        partitions = [TopicPartition(topic, p) for p in numbers]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        await consumer.seek_to_beginning(*partitions)
        async with asyncio.timeout(120):
            while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        with contextlib.suppress(DecodeError):
                            event = decode(record.value)
                            if isinstance(event, TurnCompleted):
                                found[event.turn_id].append(_completion(event))
    finally:
        await consumer.stop()
    return dict(found)


def _completion(event: TurnCompleted) -> Completion:
    error = event.error
    return Completion(
        text=event.text,
        finish_reason=str(event.finish_reason),
        error_code=error.code if error is not None else "",
        retryable=error.retryable if error is not None else False,
        recording=(event.worker_id, event.completed_at_ms),
    )


def trace_rows(settings: Settings) -> dict[str, int]:
    """Rows of `traces` per turn id (raw rows, no FINAL: a duplicate shows)."""
    client = analyst_client(settings)
    try:
        result = client.query(
            f"SELECT turn_id, count() FROM {DEFAULT_DATABASE}.traces GROUP BY turn_id"
        )
        return {turn_id: int(rows) for turn_id, rows in result.result_rows}
    finally:
        client.close()


def wait_for_traces(
    settings: Settings, turn_ids: Collection[str], timeout_s: float
) -> dict[str, int]:
    """Poll `traces` until every one of `turn_ids` has a row (the traces job closes a trace
    when the turn's events are in; the sink lingers a little), or the time is up."""
    deadline = time.monotonic() + timeout_s
    rows: dict[str, int] = {}
    while True:
        with contextlib.suppress(Exception):  # the sink may be restarting
            rows = trace_rows(settings)
        if all(t in rows for t in turn_ids) or time.monotonic() > deadline:
            return rows
        time.sleep(1.0)
