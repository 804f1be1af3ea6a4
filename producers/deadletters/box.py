"""Reading the dead-letter topic and re-driving letters, on the real Kafka.

Re-driving sends the letter's value (and key) back to its source topic and a marker into
the dead-letter topic in one transaction (a transactional id per namespace: a second
re-driver running at once fences the first, whose uncommitted sends are aborted). Readers
use read_committed, so a re-drive that failed half-way left neither record nor marker.
"""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaProducer, TopicPartition

from producers.deadletters.letters import REDRIVE_OF, REDRIVEN_FROM, DeadLetter, from_headers
from runtime.kafka_ranges import groupless_consumer, partitions_of, read_ranges, stop_consumer

BATCH = 100  # letters per transaction


async def read_all(bootstrap: str, topic: str) -> list[DeadLetter]:
    """Every committed record of the topic, in order."""
    consumer = groupless_consumer(bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(await partitions_of(consumer, topic))]
        ends = await consumer.end_offsets(tps) if tps else {}
        records = await read_ranges(consumer, {tp: (0, end) for tp, end in ends.items()})
    finally:
        await stop_consumer(consumer)
    return [
        DeadLetter(
            partition=r.partition,
            offset=r.offset,
            timestamp_ms=r.timestamp,
            key=r.key,
            value=r.value or b"",
            headers=from_headers(r.headers),
        )
        for r in sorted(records, key=lambda r: (r.partition, r.offset))
    ]


async def redrive(
    bootstrap: str, deadletters_topic: str, letters: list[DeadLetter], transactional_id: str
) -> int:
    """Re-sends the letters to their source topics, BATCH per transaction, each with its
    marker; returns how many were re-driven."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id or f"deadletters-{uuid.uuid4().hex}",
        enable_idempotence=True,
    )
    await producer.start()
    try:
        for start in range(0, len(letters), BATCH):
            async with producer.transaction():
                for letter in letters[start : start + BATCH]:
                    await producer.send(
                        letter.source_topic,
                        letter.value,
                        key=letter.key,
                        headers=[(REDRIVEN_FROM, letter.ref.encode())],
                    )
                    await producer.send(
                        deadletters_topic,
                        b"",
                        key=b"redrive",
                        headers=[
                            (REDRIVE_OF, letter.ref.encode()),
                            ("source_topic", letter.source_topic.encode()),
                        ],
                    )
        return len(letters)
    finally:
        await producer.stop()
