"""The traces job: a faust agent over the turn topics, the unfinished traces in memory.

A turn's events share a partition (keyed by conversation), so its open trace lives with the
partition's other open turns (`open_turns.OpenTurns`). When a trace is complete it goes to
Kafka `traces`. Nothing is written per event: when the job gets a partition (at start, after
a crash, in a rebalance) it rebuilds the partition's open turns from the events it had
already processed, read back from the source topics, and from what it had sent to `traces`
(a trace goes to its turn's partition number; `open_turns.rebuild`). A completed turn seen
again (a redelivery, also after a crash) is recognised by a short memory of recent turn
ids, so the sink's deduplication is the second line, not the first.

Timeouts: the job sends itself a tick per partition (topic `traces.ticks`, co-partitioned)
every `TURNSTREAM_TRACE_TICK_S`; on a tick it closes the partition's turns older than
`TURNSTREAM_TRACE_TIMEOUT_S` with a `timed_out` trace, and the completed turns that waited
longer than `TURNSTREAM_TRACE_ASSEMBLY_GRACE_S` for an assembly they do not carry (a
completion from before completions carried it; `state`). The ticks are replayed with the
rest, so a rebuild closes what the job had closed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import faust
from aiokafka import TopicPartition

from runtime.settings import Settings
from runtime.tracing.propagation import from_traceparent, has_context, incoming_context
from runtime.tracing.spans import consuming, producing
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import AnyEvent, TraceRecorded
from schemas.ids import now_ms
from schemas.topics import (
    TRACE_TICKS,
    TRACES,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    TURNS_SUBMITTED,
)
from stream_jobs.faust_app import make_app
from stream_jobs.traces.open_turns import TICK, OpenTurns, rebuild, replay_horizon_ms
from stream_jobs.traces.rebuild import Processed, processed_records
from stream_jobs.traces.state import joins

log = logging.getLogger("turnstream.traces")

RECENT = 4096  # emitted turn ids remembered per process
REBUILD_RETRY_S = (0.5, 1.0, 2.0, 5.0)  # then every 5 s: a partition is not folded unrebuilt


def create_app(settings: Settings) -> faust.App:
    return make_app(settings, "traces")


class TracesJob:
    def __init__(self, app: faust.App, settings: Settings) -> None:
        ns = settings.namespace
        # how a turn was assembled rides on its completion: `turns.assembled` is not read
        sources = (TURNS_SUBMITTED, TURNS_ENRICHED, TURNS_COMPLETED)
        self.ticks_topic = TRACE_TICKS.full_name(ns)
        self.read_topics = (*(t.full_name(ns) for t in sources), self.ticks_topic)
        self.app = app
        self.app_id = app.conf.id
        self.bootstrap = settings.kafka_bootstrap
        self.source = app.topic(*self.read_topics)
        self.traces_topic = TRACES.full_name(ns)
        self.traces = app.topic(self.traces_topic)
        self.ticks = app.topic(self.ticks_topic)
        self.timeout_ms = settings.trace_timeout_s * 1000
        self.grace_ms = settings.trace_assembly_grace_s * 1000
        self.tick_ms = settings.trace_tick_s * 1000
        # the open turns of each partition this process holds (rebuilt when it gets one)
        self.turns: dict[int, OpenTurns] = {}
        self.recent: dict[str, None] = {}
        app.agent(self.source, name="join")(self._consume)  # type: ignore[arg-type]  # faust's stubs want StreamT
        app.timer(interval=settings.trace_tick_s)(self._tick)
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]

    async def _tick(self) -> None:
        for partition in range(TRACE_TICKS.partitions):
            await self.ticks.send(value=b"tick", partition=partition)

    async def _on_revoked(self, sender: Any, revoked: set, **kwargs: Any) -> None:
        """A partition given away is forgotten: whoever gets it next rebuilds it (faust has
        drained its events first, so nothing is folded into a forgotten partition)."""
        for tp in revoked:
            self.turns.pop(tp.partition, None)

    async def _consume(self, stream: faust.Stream) -> None:
        async for event in stream.events():
            partition = event.message.partition
            turns = self.turns.get(partition)
            if turns is None:  # (an empty OpenTurns is falsy: no `or` here)
                turns = await self._rebuilt(partition)
            if event.message.topic == self.ticks_topic:
                await self._close_expired(turns, partition)
                continue
            await self._join(event, turns, partition)

    async def _join(self, record: faust.types.EventT, turns: OpenTurns, partition: int) -> None:
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
            trace = turns.fold(event, now_ms())
            if trace is not None:
                await self._emit(trace, partition)

    async def _close_expired(self, turns: OpenTurns, partition: int) -> None:
        for closed in turns.close_expired(now_ms(), self.timeout_ms, self.grace_ms):
            if closed.trace is None:
                log.warning("dropping turn %s: timed out and never submitted", closed.key.decode())
                continue
            await self._emit(closed.trace, partition)

    async def _emit(self, trace: TraceRecorded, partition: int) -> None:
        """To `traces` at the turn's own partition number, where a rebuild of that
        partition looks for what was sent."""
        conversation = trace.submitted.conversation_id.encode()
        # in the span of the event that completed it; a trace closed by the clock goes in
        # the turn's own trace
        parent = None if has_context() else from_traceparent(trace.submitted.traceparent)
        with producing(self.traces.get_topic_name(), parent=parent, turn_id=trace.turn_id) as h:
            await self.traces.send(
                key=conversation, value=encode(trace), headers=h, partition=partition
            )
        self._remember(trace.turn_id)

    def _remember(self, turn_id: str) -> None:
        self.recent[turn_id] = None
        if len(self.recent) > RECENT:
            del self.recent[next(iter(self.recent))]

    async def _rebuilt(self, partition: int) -> OpenTurns:
        """The partition's open turns, rebuilt from what the group had already processed;
        every other partition this process was given and has not rebuilt yet is rebuilt in
        the same read (after a rebalance they all come at once)."""
        started = time.perf_counter()
        partitions = {partition} | self._unrebuilt_assigned()
        processed = await self._read_processed(partitions)
        own: dict[int, list] = {number: [] for number in partitions}
        traced: dict[int, list[str]] = {number: [] for number in partitions}
        for record in processed.records:  # one pass, not one per partition
            own[record.partition].append(record)
        for record in processed.traces:
            traced[record.partition] += _turn_id(record)
        for number in partitions:
            turns, emitted = rebuild(
                self._replayed(own[number]), self.timeout_ms, self.grace_ms, traced=traced[number]
            )
            for turn_id in emitted[-RECENT:]:
                self._remember(turn_id)
            self.turns[number] = turns
        log.info(
            "partitions %s: %d open turns rebuilt from %d records and %d traces in %.2f s",
            sorted(partitions),
            sum(len(self.turns[p]) for p in partitions),
            len(processed.records),
            len(processed.traces),
            time.perf_counter() - started,
        )
        return self.turns[partition]

    def _unrebuilt_assigned(self) -> set[int]:
        assigned = self.app.consumer.assignment()
        numbers = {tp.partition for tp in assigned if tp.topic in self.read_topics}
        return numbers - set(self.turns)

    async def _read_processed(self, partitions: set[int]) -> Processed:
        """Retried while Kafka cannot be read: folding into an empty state would lose the
        partitions' open turns."""
        tps = [TopicPartition(t, p) for t in self.read_topics for p in sorted(partitions)]
        traces = [TopicPartition(self.traces_topic, p) for p in sorted(partitions)]
        for attempt in itertools.count():
            try:
                return await processed_records(
                    self.bootstrap, self.app_id, tps, traces, self._horizon
                )
            except Exception as err:  # a broker fault: wait and read again
                wait = REBUILD_RETRY_S[min(attempt, len(REBUILD_RETRY_S) - 1)]
                log.warning(
                    "partitions %s: rebuild failed (%s), again in %.1fs",
                    sorted(partitions),
                    err,
                    wait,
                )
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    def _horizon(self, stopped_ms: float) -> float:
        return replay_horizon_ms(stopped_ms, self.timeout_ms, self.tick_ms)

    def _replayed(self, records: list) -> list[tuple[float, AnyEvent | None]]:
        replayed: list[tuple[float, AnyEvent | None]] = []
        for record in records:
            if record.topic == self.ticks_topic:
                replayed.append((float(record.timestamp), TICK))
                continue
            try:
                replayed.append((float(record.timestamp), decode(record.value)))
            except DecodeError:
                continue  # skipped when it was first processed too
        return replayed


def _turn_id(record) -> list[str]:
    """The turn id of a record of `traces` ([] when it cannot be read)."""
    try:
        return [decode(record.value).turn_id]
    except DecodeError:
        return []
