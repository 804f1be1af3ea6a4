"""Sending a message to the dead-letter topic, with the reason in its headers (replayable).

Retried until Kafka takes it: a consumer may commit past a poison message only once the
message is safe in the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaError

from runtime.prometheus import DEAD_LETTERS_SENT

log = logging.getLogger("turnstream.worker")

MAX_RETRY_DELAY_S = 5.0


async def dead_letter(
    producer: AIOKafkaProducer, topic: str, record: ConsumerRecord, code: str, reason: str
) -> None:
    headers = [
        ("source_topic", record.topic.encode()),
        ("source_partition", str(record.partition).encode()),
        ("source_offset", str(record.offset).encode()),
        ("error_code", code.encode()),
        ("error", reason[:1000].encode()),
    ]
    delay = 0.1
    while True:
        try:
            await producer.send_and_wait(topic, record.value, key=record.key, headers=headers)
            DEAD_LETTERS_SENT.labels(record.topic, code).inc()
            return
        except KafkaError as err:
            log.warning("dead-lettering failed (%r); retrying in %.1fs", err, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_S)
