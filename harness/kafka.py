"""Reading a topic back in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from runtime.kafka_ranges import partitions_of
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import AnyEvent, TurnAssembled, TurnCompleted
from schemas.topics import TURNS_COMPLETED, assembled_topics


async def find_record(
    bootstrap: str,
    topic: str | tuple[str, ...],
    match: Callable[[ConsumerRecord], bool],
    wait_s: float = 30,
) -> ConsumerRecord:
    """The first record of `topic` (or of any of several, from the beginning) that `match`
    accepts."""
    consumer = AIOKafkaConsumer(
        *((topic,) if isinstance(topic, str) else topic),
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        async with asyncio.timeout(wait_s):
            while True:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        if match(record):
                            return record
    finally:
        await consumer.stop()


async def turn_event(settings: Settings, topic: str, turn_id: str) -> AnyEvent:
    """The first event of a turn on `topic` (its short name: `turns.enriched`), decoded."""
    record = await find_record(
        settings.kafka_bootstrap,
        f"{settings.namespace}.{topic}",
        lambda r: turn_id.encode() in r.value,
    )
    return decode(record.value)


async def assembled_prompt(settings: Settings, turn_id: str) -> TurnAssembled:
    """The prompt the engine was given for a turn (read back from the work queue it went
    to: a pool's topic, or the image workers')."""
    record = await find_record(
        settings.kafka_bootstrap,
        tuple(t.full_name(settings.namespace) for t in assembled_topics(settings.pool_names)),
        lambda r: turn_id.encode() in r.value,
    )
    event = decode(record.value)
    assert isinstance(event, TurnAssembled), event
    return event


async def records_so_far(
    bootstrap: str, topic: str, match: Callable[[ConsumerRecord], bool]
) -> list[ConsumerRecord]:
    """Every record of `topic` up to its current end that `match` accepts."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p) for p in sorted(await partitions_of(consumer, topic))
        ]
        assert partitions, f"no topic {topic!r}"
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        await consumer.seek_to_beginning(*partitions)
        found: list[ConsumerRecord] = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [r for r in records if match(r)]
        return found
    finally:
        await consumer.stop()


async def completions_of(settings: Settings, turn_id: str) -> int:
    """How many times a turn was recorded in `turns.completed` (answered-once checks; not
    what the edge records there: truncations, speech delivered)."""
    records = await records_so_far(
        settings.kafka_bootstrap,
        TURNS_COMPLETED.full_name(settings.namespace),
        lambda r: turn_id.encode() in r.value,
    )
    return sum(isinstance(decode(r.value), TurnCompleted) for r in records)
