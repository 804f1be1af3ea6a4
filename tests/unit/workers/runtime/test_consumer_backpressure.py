"""The worker loop's backpressure and commit rules, with an in-memory consumer."""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import ConsumerRecord, TopicPartition

from runtime.cancelling import cancel_and_wait
from schemas.codec import encode
from schemas.events import TurnCancelled
from workers.runtime import consumer as consumer_module
from workers.runtime.consumer import ConsumerLoop


class MemoryConsumer:
    """The slice of AIOKafkaConsumer that ConsumerLoop uses."""

    def __init__(self, records: list[ConsumerRecord]) -> None:
        self.records = records
        self.fetched = 0
        self.commits: list[dict] = []

    def subscribe(self, topics, listener=None) -> None:
        self.listener = listener

    async def getone(self) -> ConsumerRecord:
        if self.fetched >= len(self.records):
            await asyncio.Event().wait()  # nothing more: block like a real consumer
        self.fetched += 1
        return self.records[self.fetched - 1]

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("t", 0)}

    async def commit(self, offsets) -> None:
        self.commits.append({tp: meta.offset for tp, meta in offsets.items()})


def records(n: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(
            topic="t",
            partition=0,
            offset=i,
            timestamp=0,
            timestamp_type=0,
            key=b"k",
            value=encode(TurnCancelled(turn_id=f"t{i}", conversation_id="c")),
            checksum=None,
            serialized_key_size=1,
            serialized_value_size=1,
            headers=(),
        )
        for i in range(n)
    ]


async def test_a_full_worker_stops_fetching_and_commits_only_finished_prefixes():
    release: dict[str, asyncio.Event] = {f"t{i}": asyncio.Event() for i in range(5)}
    running: list[str] = []

    async def handler(event) -> None:
        running.append(event.turn_id)
        await release[event.turn_id].wait()

    consumer = MemoryConsumer(records(5))
    loop = ConsumerLoop(consumer, None, handler, topics=["t"], deadletter_topic="d", max_inflight=2)
    task = asyncio.create_task(loop.run())
    try:
        for _ in range(20):
            await asyncio.sleep(0)
        assert running == ["t0", "t1"] and consumer.fetched == 2  # full: no third fetch
        release["t1"].set()  # finishes out of order
        for _ in range(20):
            await asyncio.sleep(0)
        assert running == ["t0", "t1", "t2"]
        await loop.commit()
        assert consumer.commits[-1] == {TopicPartition("t", 0): 0}  # t0 still running
        release["t0"].set()
        for _ in range(20):
            await asyncio.sleep(0)
        await loop.commit()
        assert consumer.commits[-1] == {TopicPartition("t", 0): 2}  # t2 still running
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await loop.drain(timeout_s=0)
    assert loop.tracker.in_flight() == 2  # t2, t3 dropped uncommitted: they are redelivered


async def test_a_handler_bug_is_dead_lettered_and_reported_to_the_client():
    reported = []

    async def buggy(event) -> None:
        raise KeyError("bug")

    async def on_failure(event, reason) -> None:
        reported.append((event.turn_id, reason))

    class DeadLetters:
        sent: list = []

        async def send_and_wait(self, topic, value, key=None, headers=None):
            self.sent.append((topic, dict(headers)["error_code"]))

    consumer = MemoryConsumer(records(1))
    producer = DeadLetters()
    loop = ConsumerLoop(
        consumer,
        producer,
        buggy,
        topics=["t"],
        deadletter_topic="d",
        max_inflight=1,
        on_failure=on_failure,
    )
    task = asyncio.create_task(loop.run())
    try:
        for _ in range(20):
            await asyncio.sleep(0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert producer.sent == [("d", b"handler_failed")]
    assert reported == [("t0", "KeyError('bug')")]
    await loop.commit()
    assert consumer.commits[-1] == {TopicPartition("t", 0): 1}  # done with it: committed


def committers() -> set[asyncio.Task]:
    """The committer tasks of every ConsumerLoop on this loop still running (in a full run,
    the integration tests' session-wide pipeline keeps its own running here too)."""
    name = "ConsumerLoop._commit_periodically"
    return {
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "") == name
    }


async def test_a_stop_cancelled_again_still_ends_the_committer(monkeypatch):
    """`run_service` stops `run` with `cancel_and_wait`, which cancels it again while `run` is
    still stopping its committer. A committer that swallowed its cancel (what
    `runtime.cancelling` guards against, CPython gh-86296) must still be cancelled again and
    awaited: left behind, it would commit for ever on the loop."""
    monkeypatch.setattr(consumer_module, "COMMIT_INTERVAL_S", 0.01)
    committing = asyncio.Event()

    class SwallowsOneCancel(MemoryConsumer):
        async def commit(self, offsets) -> None:
            committing.set()
            # as `wait_for` does when its operation ends in the step of the cancel
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
            self.commits.append({tp: meta.offset for tp, meta in offsets.items()})

    async def handler(event) -> None:
        return None

    others = committers()  # not this test's: left alone
    consumer = SwallowsOneCancel(records(1))
    loop = ConsumerLoop(consumer, None, handler, topics=["t"], deadletter_topic="d", max_inflight=1)
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(committing.wait(), timeout=5)
        # re-cancels `run` before its own stop re-cancels the committer (both 0.5 s in service)
        await asyncio.wait_for(cancel_and_wait([task], recancel_s=0.05), timeout=5)
        assert task.cancelled()
        assert committers() - others == set()
    finally:
        await cancel_and_wait([task, *(committers() - others)])
