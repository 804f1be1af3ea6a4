"""Reading fixed offset ranges of partitions with a group-less consumer (no commits, the
live consumers' positions untouched): what a job rebuilding its state, or a replay, reads."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition


def groupless_consumer(
    bootstrap: str, isolation_level: str = "read_uncommitted"
) -> AIOKafkaConsumer:
    """A consumer that never joins a group nor commits; a range whose start the retention
    already deleted is read from what remains. A fetch the broker holds for lack of data
    answers within 50 ms, not 500: a reader that seeks elsewhere (the ranges of one read
    after another) would otherwise wait out the fetch it had in flight. `read_committed`
    for a topic written in transactions (aborted records are skipped)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        isolation_level=isolation_level,
    )


async def partitions_of(consumer: AIOKafkaConsumer, topic: str, attempts: int = 5) -> set[int]:
    """The topic's partitions from fresh metadata (empty when it does not exist). A topic
    created moments ago may miss from the first answers while its leaders are elected."""
    for attempt in range(attempts):
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return set(partitions)
        if topic in await consumer.topics():  # exists: refresh the consumer's own metadata
            await consumer._client.force_metadata_update()  # no public way (aiokafka 0.14)
            continue
        if attempt < attempts - 1:
            await asyncio.sleep(1.0)
    return set()


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop a group-less consumer. aiokafka 0.14's no-group coordinator re-raises the
    cancellation of its own helper task from `stop()` when that task never got to run;
    that one is swallowed, a cancellation of the caller is not."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def read_ranges(
    consumer: AIOKafkaConsumer, ranges: dict[TopicPartition, tuple[int, int]]
) -> list[ConsumerRecord]:
    """The records at offsets [start, end) of each partition (a started group-less
    consumer; its assignment becomes these partitions)."""
    todo = {tp: end for tp, (start, end) in ranges.items() if start < end}
    consumer.assign(list(todo))
    for tp in todo:
        consumer.seek(tp, max(0, ranges[tp][0]))
    found: list[ConsumerRecord] = []
    while todo:
        for tp, records in (await consumer.getmany(*todo, timeout_ms=500)).items():
            found += [r for r in records if r.offset < todo.get(tp, -1)]
        for tp in list(todo):
            if await consumer.position(tp) >= todo[tp]:
                del todo[tp]
    return found
