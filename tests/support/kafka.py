"""Reading a topic back in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord


async def find_record(
    bootstrap: str, topic: str, match: Callable[[ConsumerRecord], bool], wait_s: float = 30
) -> ConsumerRecord:
    """The first record of `topic` (from the beginning) that `match` accepts."""
    consumer = AIOKafkaConsumer(
        topic,
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
