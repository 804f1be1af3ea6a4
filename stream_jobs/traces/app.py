"""The traces job: a faust agent over the turn topics, a table of unfinished traces.

The table is keyed by turn id; a turn's events share a partition (keyed by conversation),
so its row lives there too. When a trace is complete it goes to Kafka `traces` and the row
is deleted. A completed turn seen again (a redelivery) is recognised by a short memory of
recent turn ids, so the sink's deduplication is the second line, not the first.

Timeouts: faust only lets a table change while one of its partition's events is processed,
so the job sends itself a tick per partition (topic `traces.ticks`, co-partitioned) every
`TURNSTREAM_TRACE_TICK_S`; on a tick it closes the partition's turns older than
`TURNSTREAM_TRACE_TIMEOUT_S` with a `timed_out` trace, and the completed turns that waited
longer than `TURNSTREAM_TRACE_ASSEMBLY_GRACE_S` for their `turn.assembled` without it.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import faust

from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import AnyEvent, TraceRecorded
from schemas.ids import now_ms
from schemas.settings import Settings
from schemas.topics import (
    TRACE_TICKS,
    TRACES,
    TURNS_ASSEMBLED,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    TURNS_SUBMITTED,
)
from schemas.tracing.propagation import from_traceparent, has_context, incoming_context
from schemas.tracing.spans import consuming, producing
from stream_jobs.faust_app import make_app
from stream_jobs.traces.state import (
    awaiting_assembly,
    decode_pending,
    encode_pending,
    expired,
    joins,
    on_event,
    timed_out,
)

log = logging.getLogger("turnstream.traces")

RECENT = 4096  # emitted turn ids remembered per process


def create_app(settings: Settings) -> faust.App:
    return make_app(settings, "traces")


class TracesJob:
    def __init__(self, app: faust.App, settings: Settings) -> None:
        ns = settings.namespace
        sources = (TURNS_SUBMITTED, TURNS_ENRICHED, TURNS_ASSEMBLED, TURNS_COMPLETED)
        self.ticks_topic = TRACE_TICKS.full_name(ns)
        self.app_id = app.conf.id
        self.source = app.topic(*(t.full_name(ns) for t in sources), self.ticks_topic)
        self.traces = app.topic(TRACES.full_name(ns))
        self.ticks = app.topic(self.ticks_topic)
        self.table = app.Table(
            "pending", partitions=TURNS_SUBMITTED.partitions, key_type=bytes, value_type=bytes
        )
        self.timeout_ms = settings.trace_timeout_s * 1000
        self.grace_ms = settings.trace_assembly_grace_s * 1000
        # completed turns still waiting for their assembly, with when the completion came
        self.awaiting: dict[int, dict[bytes, float]] = defaultdict(dict)
        self.recent: dict[str, None] = {}
        # Open turns per partition, with when they were first seen: a tick on a partition
        # closes its expired turns (table writes must happen in that partition's events).
        self.opened: dict[int, dict[bytes, float]] = defaultdict(dict)
        self._indexed: set[int] = set()
        app.agent(self.source, name="join")(self._consume)
        app.timer(interval=settings.trace_tick_s)(self._tick)

    async def _tick(self) -> None:
        for partition in range(TRACE_TICKS.partitions):
            await self.ticks.send(value=b"tick", partition=partition)

    async def _consume(self, stream: faust.Stream) -> None:
        async for event in stream.events():
            partition = event.message.partition
            self._index_recovered(partition)
            if event.message.topic == self.ticks_topic:
                await self._close_expired(partition)
                continue
            await self._join(event, partition)

    async def _join(self, record: faust.types.EventT, partition: int) -> None:
        try:
            event = decode(record.value)
        except DecodeError as err:
            log.warning("skipping an undecodable event: %s", err)  # dead-lettered upstream
            return
        if event.turn_id in self.recent or not joins(event):
            return
        with consuming(
            record.message.topic,
            parent=incoming_context(record.headers, event),
            turn_id=event.turn_id,
            partition=partition,
            offset=record.message.offset,
            group=self.app_id,
        ):
            await self._fold(event, partition)

    async def _fold(self, event: AnyEvent, partition: int) -> None:
        key = event.turn_id.encode()
        pending = decode_pending(self.table.get(key))
        trace = on_event(pending, event)
        if trace is None:
            self.table[key] = encode_pending(pending)
            self.opened[partition].setdefault(key, now_ms())
            if awaiting_assembly(pending):
                self.awaiting[partition].setdefault(key, now_ms())
            return
        await self._emit(trace, key, partition)

    async def _close_expired(self, partition: int) -> None:
        now = now_ms()
        late = expired(self.awaiting[partition], now, self.grace_ms)
        for key in dict.fromkeys(late + expired(self.opened[partition], now, self.timeout_ms)):
            trace = timed_out(decode_pending(self.table.get(key)), key.decode(), now)
            if trace is None:
                log.warning("dropping turn %s: timed out and never submitted", key.decode())
                self.opened[partition].pop(key, None)
                self.table.pop(key, None)
                continue
            await self._emit(trace, key, partition)

    async def _emit(self, trace: TraceRecorded, key: bytes, partition: int) -> None:
        conversation = trace.submitted.conversation_id.encode()
        # in the span of the event that completed it; a trace closed by the clock goes in
        # the turn's own trace
        parent = None if has_context() else from_traceparent(trace.submitted.traceparent)
        with producing(self.traces.get_topic_name(), parent=parent, turn_id=trace.turn_id) as h:
            await self.traces.send(key=conversation, value=encode(trace), headers=h)
        self.table.pop(key, None)
        self.opened[partition].pop(key, None)
        self.awaiting[partition].pop(key, None)
        self.recent[trace.turn_id] = None
        if len(self.recent) > RECENT:
            del self.recent[next(iter(self.recent))]

    def _index_recovered(self, partition: int) -> None:
        """Rows recovered from the changelog are open turns too; their clock starts now."""
        if partition in self._indexed:
            return
        self._indexed.add(partition)
        recovered = getattr(self.table.data, "_key_partition", {})  # memory store: from recovery
        now = now_ms()
        for key, key_partition in list(recovered.items()):
            if key_partition == partition and key in self.table:
                self.opened[partition].setdefault(key, now)
                if awaiting_assembly(decode_pending(self.table[key])):
                    self.awaiting[partition].setdefault(key, now)
