"""Reading the dead-letter topic and re-driving letters, on the real Kafka.

Re-driving sends the letter's value (and key) back to its source topic and a marker into
the dead-letter topic in one transaction (a transactional id per namespace: a second
re-driver running at once fences the first, whose uncommitted sends are aborted). Readers
use read_committed, so a re-drive that failed half-way left neither record nor marker.
"""

from __future__ import annotations

import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from producers.deadletters.letters import REDRIVE_OF, REDRIVEN_FROM, DeadLetter, from_headers
from runtime.kafka_ranges import partitions_of, stop_consumer

BATCH = 100  # letters per transaction


async def read_all(bootstrap: str, topic: str) -> list[DeadLetter]:
    """Every committed record of the topic, in order."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(await partitions_of(consumer, topic))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        todo = {tp: end for tp, end in ends.items() if end > 0}
        letters: list[DeadLetter] = []
        while todo:
            batches = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, records in batches.items():
                letters += [
                    DeadLetter(
                        partition=r.partition,
                        offset=r.offset,
                        timestamp_ms=r.timestamp,
                        key=r.key,
                        value=r.value or b"",
                        headers=from_headers(r.headers),
                    )
                    for r in records
                    if r.offset < todo.get(tp, 0)
                ]
            for tp in list(todo):
                if await consumer.position(tp) >= todo[tp]:
                    todo.pop(tp)
        return letters
    finally:
        await stop_consumer(consumer)


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
