"""The sink loop: fetch → decode and check → batch → insert → commit.

- At-least-once delivery, exactly-once rows: offsets are committed only after ClickHouse
  acknowledged the insert. Every row names its Kafka record (`kafka_topic`,
  `kafka_partition`, `kafka_offset`), so when a partition is (re)assigned the sink asks the
  table which records past the committed offset are already in, and skips them: a crash or
  a failed commit between insert and commit repeats nothing, however the records are
  batched the second time. (The insert deduplication token is scoped to this process's
  lifetime: it guards an in-process retry of an insert whose answer was lost, never a
  restart, because an embedded engine killed mid-insert can keep a token without its rows.)
- Records a rebalance delivers again within one batch are dropped by offset.
- ClickHouse down or refusing: the insert is retried with backoff and nothing is fetched or
  committed meanwhile (Kafka holds the backlog); it catches up when ClickHouse is back.
- Poison (undecodable, unknown version, absurd values): dead-lettered with the reason before
  its offset can be committed; the sink keeps going.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, ConsumerRecord
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from runtime.lag import aiokafka_lag
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.ids import now_ms
from workers.runtime.deadletters import dead_letter
from workers.sink.batch import Batch, BatchLimits
from workers.sink.rows import RowRejected

log = logging.getLogger("turnstream.sink")

MAX_RETRY_DELAY_S = 5.0
LAG_SAMPLES = 200_000  # enough for every row of a benchmark run
RowOf = Callable[[Any, float], list[tuple]]  # event, now → its rows ([]: not for this table)
# appended by the sink to every row: the record it came from (see migration 0005)
SOURCE_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset")


@dataclass
class SinkStats:
    rows: int = 0
    inserts: int = 0
    clickhouse_failures: int = 0
    dead_letters: int = 0
    already_stored: int = 0  # records skipped after a reassignment: their rows were in
    redelivered: int = 0  # records a rebalance delivered again within a batch
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
        self.incarnation = uuid.uuid4().hex[:12]  # scopes insert tokens to this process
        self._fresh: set[TopicPartition] = set()  # assigned, not yet checked against the table
        self._stored: dict[TopicPartition, set[int]] = {}  # offsets past the commit, in the table
        self._in_flight: asyncio.Task[None] | None = None  # the batch being inserted
        self._column_types: Sequence[Any] | None = None  # the table's, read at first insert
        self._lag = aiokafka_lag(consumer)

    def rebalance_listener(self) -> ConsumerRebalanceListener:
        """Pass to `subscribe`: every partition assigned is checked against the table before
        its first record is taken."""
        return _Assignments(self)

    async def run(self) -> None:
        """Fetch and decode the next batch while the previous one is inserted (one insert
        in flight; batches are committed in order)."""
        batch = Batch(opened_at=time.monotonic())
        try:
            while True:
                wait_ms = max(1, int(self.limits.linger_s * 1000))
                fetched = await self.consumer.getmany(
                    timeout_ms=wait_ms, max_records=self.limits.max_rows
                )
                for tp, records in fetched.items():
                    for record in records:
                        await self._take(batch, tp, record)
                    if records:
                        self._lag.observe(tp.topic, tp.partition, records[-1].offset)
                if batch.due(self.limits, time.monotonic()):
                    await self._flushed()
                    self._in_flight = asyncio.create_task(self._flush(batch))
                    batch = Batch(opened_at=time.monotonic())
        finally:
            if self._in_flight is not None:  # uncommitted: the next owner reads it again
                self._in_flight.cancel()

    async def _flushed(self) -> None:
        """Wait for the batch in flight to be inserted and committed."""
        if self._in_flight is not None:
            await self._in_flight
            self._in_flight = None

    async def _take(self, batch: Batch, tp: TopicPartition, record: ConsumerRecord) -> None:
        if not batch.consumed(tp, record.offset):
            self.stats.redelivered += 1
            return
        if tp in self._fresh:  # the fetch starts at the committed offset: this one
            self._fresh.discard(tp)
            await self._flushed()  # its rows may be among those this partition re-reads
            self._stored[tp] = await self._stored_since(tp, record.offset)
        stored = self._stored.get(tp)
        if stored and record.offset in stored:
            stored.discard(record.offset)
            self.stats.already_stored += 1
            return
        try:
            rows = self.spec.row_of(decode(record.value), now_ms())
        except (DecodeError, RowRejected) as err:
            await self._dead_letter(record, getattr(err, "code", "invalid_row"), str(err))
            return
        size = len(record.value)
        for row in rows:  # one record's rows go together: one batch, one insert
            batch.add((*row, record.topic, record.partition, record.offset), size)
            size = 0

    async def _stored_since(self, tp: TopicPartition, offset: int) -> set[int]:
        """Offsets of `tp` from `offset` on whose rows are already in the table."""
        query = (
            f"SELECT kafka_offset FROM {self.spec.table} WHERE kafka_topic = %(topic)s"
            " AND kafka_partition = %(partition)s AND kafka_offset >= %(offset)s"
        )
        params = {"topic": tp.topic, "partition": tp.partition, "offset": offset}
        result = await self._until_done(
            lambda: self.client.query(query, parameters=params), f"stored offsets of {tp}"
        )
        stored = {row[0] for row in result.result_rows}
        if stored:
            log.info("%s: %d records past the commit are already stored", tp, len(stored))
        return stored

    async def _flush(self, batch: Batch) -> None:
        if batch.rows:
            await self._insert(batch)
        offsets = {tp: OffsetAndMetadata(off, "") for tp, off in batch.commit_offsets().items()}
        try:
            await self.consumer.commit(offsets)
        except KafkaError as err:  # a rebalance took the partitions: the new owner re-reads
            log.warning("commit failed (%r); the rows are in, re-reads are deduplicated", err)

    async def _insert(self, batch: Batch) -> None:
        settings = {"insert_deduplication_token": f"{self.incarnation}/{batch.token()}"}
        await self._until_done(
            lambda: self._insert_rows(batch.rows, settings), f"insert of {len(batch.rows)} rows"
        )
        self.stats.inserts += 1
        self.stats.rows += len(batch.rows)
        if self.spec.stamp_index is not None:
            done = time.time() * 1000
            self.stats.lag_ms.extend(
                done - row[self.spec.stamp_index].timestamp() * 1000 for row in batch.rows
            )

    def _insert_rows(self, rows: list[tuple], settings: dict[str, str]) -> None:
        """One insert (blocking). The columns' types are read from the table once, not
        before every insert (the driver's DESCRIBE was ~a fifth of an insert's CPU); after a
        failed insert they are read again, in case a migration changed them."""
        columns = [*self.spec.columns, *SOURCE_COLUMNS]
        if self._column_types is None:
            context = self.client.create_insert_context(self.spec.table, column_names=columns)
            self._column_types = context.column_types
        try:
            self.client.insert(
                self.spec.table,
                rows,
                column_names=columns,
                column_types=self._column_types,
                settings=settings,
            )
        except Exception:
            self._column_types = None
            raise

    async def _until_done(self, call: Callable[[], Any], what: str) -> Any:
        """Run a blocking ClickHouse call in a thread until it succeeds, backing off while
        ClickHouse is down or refusing (nothing is fetched or committed meanwhile)."""
        delay = 0.1
        while True:
            try:
                return await asyncio.to_thread(call)
            except Exception as err:  # the server's or the driver's: all mean "not done"
                self.stats.clickhouse_failures += 1
                log.warning("%s failed (%r); retry in %.1fs", what, err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY_S)

    async def _dead_letter(self, record: ConsumerRecord, code: str, reason: str) -> None:
        log.warning(
            "dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason
        )
        await dead_letter(self.producer, self.deadletter_topic, record, code, reason)
        self.stats.dead_letters += 1


class _Assignments(ConsumerRebalanceListener):
    def __init__(self, sink: ClickHouseSink) -> None:
        self.sink = sink

    async def on_partitions_revoked(self, revoked) -> None:
        for tp in revoked:
            self.sink._stored.pop(tp, None)

    async def on_partitions_assigned(self, assigned) -> None:
        self.sink._fresh.update(assigned)
