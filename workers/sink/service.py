"""The sink loop: fetch → decode and check → batch → insert → commit.

- At-least-once delivery, exactly-once rows: offsets are committed only after ClickHouse
  acknowledged the insert; a crash in between re-reads the records, and the re-insert
  carries the same deduplication token (and lands in a ReplacingMergeTree keyed by turn).
- ClickHouse down or refusing: the insert is retried with backoff and nothing is fetched or
  committed meanwhile (Kafka holds the backlog); it catches up when ClickHouse is back.
- Poison (undecodable, unknown version, absurd values): dead-lettered with the reason before
  its offset can be committed; the sink keeps going.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.ids import now_ms
from workers.runtime.deadletters import dead_letter
from workers.sink.batch import Batch, BatchLimits
from workers.sink.rows import RowRejected

log = logging.getLogger("turnstream.sink")

MAX_RETRY_DELAY_S = 5.0
LAG_SAMPLES = 200_000  # enough for every row of a benchmark run
RowOf = Callable[[Any, float], tuple | None]  # event, now → row (None: not for this table)


@dataclass
class SinkStats:
    rows: int = 0
    inserts: int = 0
    insert_failures: int = 0
    dead_letters: int = 0
    # completed → insert acknowledged, the latest LAG_SAMPLES rows (a sink runs for months)
    lag_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LAG_SAMPLES))


@dataclass
class TableSpec:
    table: str
    columns: tuple[str, ...]
    row_of: RowOf
    stamp_index: int | None = None  # the column holding the event time, for the lag stat


class ClickHouseSink:
    def __init__(
        self,
        *,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        client: Any,  # clickhouse_connect Client (a real server or the embedded engine)
        spec: TableSpec,
        deadletter_topic: str,
        limits: BatchLimits,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.client = client
        self.spec = spec
        self.deadletter_topic = deadletter_topic
        self.limits = limits
        self.stats = SinkStats()

    async def run(self) -> None:
        batch = Batch(opened_at=time.monotonic())
        while True:
            wait_ms = max(1, int(self.limits.linger_s * 1000))
            fetched = await self.consumer.getmany(
                timeout_ms=wait_ms, max_records=self.limits.max_rows
            )
            for tp, records in fetched.items():
                for record in records:
                    await self._take(batch, tp, record)
            if batch.due(self.limits, time.monotonic()):
                await self._flush(batch)
                batch = Batch(opened_at=time.monotonic())

    async def _take(self, batch: Batch, tp, record: ConsumerRecord) -> None:
        batch.consumed(tp, record.offset)
        try:
            row = self.spec.row_of(decode(record.value), now_ms())
        except (DecodeError, RowRejected) as err:
            await self._dead_letter(record, getattr(err, "code", "invalid_row"), str(err))
            return
        if row is not None:
            batch.add(row, len(record.value))

    async def _flush(self, batch: Batch) -> None:
        if batch.rows:
            await self._insert(batch)
        offsets = {tp: OffsetAndMetadata(off, "") for tp, off in batch.commit_offsets().items()}
        try:
            await self.consumer.commit(offsets)
        except KafkaError as err:  # a rebalance took the partitions: the new owner re-reads
            log.warning("commit failed (%r); the rows are in, re-reads are deduplicated", err)

    async def _insert(self, batch: Batch) -> None:
        settings = {"insert_deduplication_token": batch.token()}
        delay = 0.1
        while True:
            try:
                await asyncio.to_thread(
                    self.client.insert,
                    self.spec.table,
                    batch.rows,
                    column_names=list(self.spec.columns),
                    settings=settings,
                )
                break
            except Exception as err:  # the server's or the driver's: all mean "not stored"
                self.stats.insert_failures += 1
                log.warning(
                    "insert of %d rows failed (%r); retry in %.1fs", len(batch.rows), err, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY_S)
        self.stats.inserts += 1
        self.stats.rows += len(batch.rows)
        if self.spec.stamp_index is not None:
            done = time.time() * 1000
            self.stats.lag_ms.extend(
                done - row[self.spec.stamp_index].timestamp() * 1000 for row in batch.rows
            )

    async def _dead_letter(self, record: ConsumerRecord, code: str, reason: str) -> None:
        log.warning(
            "dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason
        )
        await dead_letter(self.producer, self.deadletter_topic, record, code, reason)
        self.stats.dead_letters += 1
