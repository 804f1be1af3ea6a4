"""faust's Kafka transport with the changes its jobs need to lose nothing in a rebalance.

- **Sends outlive a timed-out request** (`runtime.kafka_delivery`): a paused broker's sends
  move to the new leader instead of failing; faust never sends a failed record again.
- **A rebalance loses no record.** faust-streaming 0.15 drops records in three ways when
  its partitions are revoked and assigned again (a broker paused 30 s makes the job's
  group coordinator vanish for longer than its session: a rebalance). Found in the fault
  suite's pause, where three accepted turns were enriched but never assembled
  (docs/reliability.md):
  1. A record fetched in the old generation reaches the stream after the new one began:
     the stream skips it and *acks* it, so the new generation commits past a record
     nobody processed. Here a record of an older generation is released without being
     counted as processed: the commit stops before it, and the seek back to the committed
     offset fetches it again for the new generation.
  2. After the rebalance faust seeks every partition back to its committed offset, and
     aiokafka leaves a partition with no committed offset (or offset 0) where its fetch
     position was: after the records the old generation fetched and dropped. Here such a
     partition starts again from its beginning (the jobs read from the earliest).
  3. faust drops a record whose offset is below the last one its fetch loop handed on (its
     "read offset"), and that loop can record a late offset of the old generation after
     the seek back: the records between are then dropped as "already read". Here nothing
     is dropped on that guess: a record delivered twice is processed twice, which the jobs
     allow (at least once; the assembly dedupes on turn ids, the traces job on its joins).
  4. When a recovery ends, faust resumes its flow control, which *empties every stream's
     queue*: records fetched in the new generation (between the partitions' resumption and
     that call) are thrown away after aiokafka's position moved past them. The agent
     processes the ones before, the commit stops at the first dropped one, and the turn is
     never assembled (seen: an assembly job restarted after kill -9 processed records 2-5,
     dropped 6-7 and went on from 8; the same after a paused broker's rebalance, where it
     looked like a stall). Here `RewindingFlowControl` hands what it clears to
     `Consumer.rewind`, which sends each partition back to its lowest dropped record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as driver
from faust.types import TP, Message
from faust.types.tuples import ack_lock
from mode.utils.futures import notify
from mode.utils.queues import FlowControlEvent

from runtime.kafka_delivery import DeliveringProducer
from runtime.kafka_metadata import named_topics_only

SCHEME = "turnstream-kafka"

log = logging.getLogger("turnstream.faust")


class Producer(driver.Producer):
    @property
    def _producer_type(self) -> type[AIOKafkaProducer]:
        return DeliveringProducer


class ReadOffsets(dict):
    """faust's read offsets, kept (faust writes them) but never used to drop a record."""

    def __getitem__(self, tp: TP) -> None:
        return None


class ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: driver.Transport) -> Any:
        """faust's consumer, reading the metadata of its subscription only
        (`runtime.kafka_metadata`)."""
        consumer = super()._create_worker_consumer(transport)
        named_topics_only(consumer._client)
        return consumer

    async def seek_to_committed(self) -> Mapping[TP, int]:
        return await self.call_thread(self._seek_to_committed_or_beginning)

    async def _seek_to_committed_or_beginning(self) -> Mapping[TP, int]:
        consumer = self._ensure_consumer()
        committed = await consumer.seek_to_committed()
        uncommitted = [
            tp
            for tp, offset in committed.items()
            if not offset and not self.consumer._is_changelog_tp(tp)
        ]
        if uncommitted:
            await consumer.seek_to_beginning(*uncommitted)
        return committed


class Consumer(driver.Consumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = ReadOffsets()
        self._refetching = Refetching()

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Message) -> bool:
        generation = self.app.consumer_generation_id
        if stale(message, generation):
            with ack_lock:  # done with it, but not processed: its offset is not committed
                message.acked = True
                self._unacked_messages.discard(message)
                notify(self._waiting_for_ack)  # a rebalance waits for the unacked to drain
            self._fetch_again(message.tp, message.offset, generation)
            return False
        return super().ack(message)

    def _fetch_again(self, tp: TP, offset: int, generation: int) -> None:
        """Seek back to a record the stream skipped as stale, so this generation gets it:
        faust's own seek to the committed offsets can come before records fetched in the
        old generation reach the stream (seen: two records skipped after it, the commit
        stuck below them, their turn never assembled)."""
        committed = self._committed_offset.get(tp)
        if committed is not None and offset < committed:
            return  # committed already: processed in an earlier generation
        if not self._refetching.needed(tp, offset, generation):
            return
        try:
            if tp in self.assignment():
                self._thread.seek(tp, offset)
                self.log.info("%r sent back to %d: a record of an older generation", tp, offset)
        except Exception:  # revoked meanwhile: its next owner reads from the committed offset
            self._refetching.forget(tp)

    def rewind(self, dropped: Iterable[Message]) -> None:
        """Records taken off a stream's queue unprocessed (`RewindingFlowControl`): each
        partition of ours goes back to its lowest such record, which is fetched again. They
        were never acked, so no commit passed them; they leave the unacked set (a rebalance
        waits for that set to empty)."""
        dropped = list(dropped)
        with ack_lock:
            for message in dropped:
                message.acked = True
                self._unacked_messages.discard(message)
            notify(self._waiting_for_ack)
        generation = self.app.consumer_generation_id
        try:
            assigned = self.assignment()
        except Exception:  # not started, or stopping: the next owner reads from the commit
            return
        points = rewind_points(
            dropped,
            assigned=assigned,
            committed=self._committed_offset,
            skip=self._is_changelog_tp,
        )
        for tp, offset in points.items():
            self._refetching.lower(tp, offset, generation)
            try:
                self._thread.seek(tp, offset)
            except Exception:  # revoked meanwhile
                continue
        if points:
            log.warning(
                "%d unprocessed record(s) cleared from the stream queues; sent back: %s",
                len(dropped),
                ", ".join(f"{tp.topic}[{tp.partition}]@{o}" for tp, o in sorted(points.items())),
            )


class Refetching:
    """The lowest offset each partition was sent back to in the current generation: a
    later stale record at or above it is fetched again anyway (the records come back in
    order), and seeking forward to it would skip the ones between (pure)."""

    def __init__(self) -> None:
        self._generation: int | None = None
        self._lowest: dict[TP, int] = {}

    def needed(self, tp: TP, offset: int, generation: int) -> bool:
        if generation != self._generation:
            self._generation, self._lowest = generation, {}
        lowest = self._lowest.get(tp)
        if lowest is not None and offset >= lowest:
            return False
        self._lowest[tp] = offset
        return True

    def lower(self, tp: TP, offset: int, generation: int) -> None:
        """`tp` was sent back to `offset` by other means (a rewind)."""
        self.needed(tp, offset, generation)

    def forget(self, tp: TP) -> None:
        self._lowest.pop(tp, None)


def rewind_points(
    dropped: Iterable[Message],
    *,
    assigned: Iterable[TP],
    committed: Mapping[TP, int | None],
    skip: Callable[[TP], bool],
) -> dict[TP, int]:
    """Where each partition must read again from (pure): its lowest dropped record, for
    the partitions still ours, not skipped (changelogs: recovery reads them) and not
    already committed past it."""
    ours = set(assigned)
    points: dict[TP, int] = {}
    for message in dropped:
        tp, offset = message.tp, message.offset
        if tp not in ours or skip(tp):
            continue
        done = committed.get(tp)
        if done is not None and offset < done:
            continue
        if offset < points.get(tp, offset + 1):
            points[tp] = offset
    return points


class RewindingFlowControl(FlowControlEvent):
    """faust's flow control, but what it clears out of the stream queues goes to
    `on_cleared` (the consumer's rewind) instead of being forgotten."""

    def __init__(self, on_cleared: Callable[[list[Message]], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_cleared = on_cleared

    def clear(self) -> None:
        dropped = [
            message
            for queue in list(self._queues)
            for item in list(queue._queue)  # type: ignore[attr-defined]  # asyncio's deque
            if (message := _message_of(item)) is not None
        ]
        super().clear()
        if dropped:
            self._on_cleared(dropped)


def _message_of(item: Any) -> Message | None:
    """The Kafka record behind a queued stream event (None for anything else)."""
    message = getattr(item, "message", None)
    return message if isinstance(message, Message) else None


def stale(message: Message, generation_id: int) -> bool:
    """Fetched in an earlier generation of the group (before a rebalance)."""
    return message.generation_id is not None and message.generation_id != generation_id


class Transport(driver.Transport):
    Consumer = Consumer
    Producer = Producer


def register() -> str:
    """Make `turnstream-kafka://` name this transport (idempotent); the scheme."""
    TRANSPORTS[SCHEME] = f"{__name__}:Transport"
    return SCHEME
