"""The worker loop: fetch from Kafka, decode, handle concurrently, commit what is safe.

- Backpressure: at most `max_inflight` messages are handled at once; beyond that the loop
  stops fetching (Kafka keeps the rest, nothing buffers without bound).
- At-least-once: an offset is committed only when every earlier message of its partition is
  done, so a crash redelivers unfinished work (handlers must be idempotent).
- Undecodable messages and handler bugs go to the dead-letter topic with the reason in
  headers; they never stop the consumer. Outages of Kafka or Redis are retried with
  backoff instead (dead-lettering a valid turn would leave its user without an answer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from redis.exceptions import RedisError

from runtime.cancelling import stop_despite_cancels
from runtime.lag import aiokafka_lag
from runtime.tracing.propagation import incoming_context
from runtime.tracing.spans import consuming
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import AnyEvent
from workers.runtime.deadletters import dead_letter
from workers.runtime.draining import finish_or_cancel
from workers.runtime.offsets import OffsetTracker

log = logging.getLogger("turnstream.worker")

Handler = Callable[[AnyEvent], Awaitable[None]]
COMMIT_INTERVAL_S = 0.2
MAX_RETRY_DELAY_S = 5.0
REVOKE_DRAIN_S = 60.0  # under max_poll_interval: a rebalance waits at most this for turns


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, loop: ConsumerLoop) -> None:
        self._loop = loop

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # Finish what this worker started on the revoked partitions before they move:
        # otherwise their new owner would re-read the uncommitted turns and answer them a
        # second time while this worker is still answering.
        await self._loop.drain_partitions(set(revoked), REVOKE_DRAIN_S)
        try:
            await self._loop.commit()
        finally:
            self._loop.tracker.forget(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))


class ConsumerLoop:
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        handler: Handler,
        *,
        topics: list[str],
        deadletter_topic: str,
        max_inflight: int,
        retry_on: tuple[type[BaseException], ...] = (RedisError, KafkaError, OSError),
        on_failure: Callable[[AnyEvent, str], Awaitable[None]] | None = None,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.handler = handler
        self.topics = topics
        self.deadletter_topic = deadletter_topic
        self.retry_on = retry_on
        self.on_failure = on_failure  # tells the client when its turn could not be handled
        self.tracker: OffsetTracker[TopicPartition] = OffsetTracker()
        self._slots = asyncio.Semaphore(max_inflight)
        self._tasks: dict[asyncio.Task[None], TopicPartition] = {}
        self._lag = aiokafka_lag(consumer)

    async def run(self) -> None:
        self.consumer.subscribe(self.topics, listener=_Rebalance(self))
        committer = asyncio.create_task(self._commit_periodically())
        try:
            while True:
                await self._slots.acquire()
                try:
                    record = await self.consumer.getone()
                except BaseException:
                    self._slots.release()
                    raise
                tp = TopicPartition(record.topic, record.partition)
                self._lag.observe(record.topic, record.partition, record.offset)
                self.tracker.started(tp, record.offset)
                task = asyncio.create_task(self._process(tp, record))
                self._tasks[task] = tp
                task.add_done_callback(self._forget_task)
        finally:
            await stop_despite_cancels(committer)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def drain_partitions(self, partitions: set[TopicPartition], timeout_s: float) -> None:
        """Let in-flight messages of `partitions` finish; cancel those still running after
        `timeout_s` (left uncommitted, so they are redelivered)."""
        tasks = {t for t, tp in self._tasks.items() if tp in partitions}
        await finish_or_cancel(tasks, timeout_s)

    async def drain(self, timeout_s: float) -> None:
        """Stop: let in-flight messages finish (up to `timeout_s`), then commit what is done.
        `timeout_s=0` behaves like a crash for the books: nothing unfinished is committed."""
        await self.drain_partitions(set(self._tasks.values()), timeout_s)
        await self.commit()

    async def _process(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        handled = False
        try:
            try:
                event = decode(record.value)
            except DecodeError as err:
                log.warning("dead-lettering %s@%d: %s", tp, record.offset, err)
                await self._retrying_dead_letter(record, err.code, str(err))
            else:
                with self._span(record, event):
                    try:
                        await self._handle_with_retries(event)
                    except asyncio.CancelledError:
                        raise
                    except Exception as err:
                        log.exception("handler failed on %s@%d", tp, record.offset)
                        await self._retrying_dead_letter(record, "handler_failed", repr(err))
                        await self._report_failure(event, repr(err))
            handled = True
        except asyncio.CancelledError:
            pass  # stopping: left uncommitted, so it is redelivered
        except Exception:
            log.exception("giving up on %s@%d; it will be redelivered", tp, record.offset)
        finally:
            if handled:
                self.tracker.finished(tp, record.offset)
            self._slots.release()

    def _span(self, record: ConsumerRecord, event: AnyEvent):
        """`process <topic>`, the child of the record's trace context (its headers, else the
        turn's own): everything the handler produces continues the turn's trace."""
        return consuming(
            record.topic,
            parent=incoming_context(record.headers, event),
            turn_id=event.turn_id,
            partition=record.partition,
            offset=record.offset,
            group=getattr(self.consumer, "_group_id", None) or "",
        )

    async def _report_failure(self, event: AnyEvent, reason: str) -> None:
        """Tell the client; if even that fails, the message is still done (dead-lettered),
        so the partition's commits never stall behind it."""
        if self.on_failure is None:
            return
        try:
            await self.on_failure(event, reason)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not report the failure of %s", event.turn_id)

    async def _retrying_dead_letter(self, record: ConsumerRecord, code: str, reason: str):
        """Dead letters must land (else the partition's commits would stall behind them)."""
        await dead_letter(self.producer, self.deadletter_topic, record, code, reason)

    async def _handle_with_retries(self, event: AnyEvent) -> None:
        """Outages of Kafka or Redis are waited out (the message stays uncommitted and its
        turn unanswered until they are back); only the handler's own bugs dead-letter."""
        delay = 0.1
        while True:
            try:
                await self.handler(event)
                return
            except self.retry_on as err:
                log.warning("turn %s: %r; retrying in %.1fs", event.turn_id, err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY_S)

    async def commit(self) -> None:
        offsets = self.tracker.committable()
        if not offsets:
            return
        assigned = self.consumer.assignment()
        offsets = {tp: off for tp, off in offsets.items() if tp in assigned}
        if not offsets:
            return
        await self.consumer.commit({tp: OffsetAndMetadata(off, "") for tp, off in offsets.items()})
        self.tracker.mark_committed(offsets)

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_INTERVAL_S)
            try:
                await self.commit()
            except Exception:
                log.warning("offset commit failed; will retry", exc_info=True)
