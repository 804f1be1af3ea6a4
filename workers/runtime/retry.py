"""Retrying a step through transient Kafka and Redis outages (the shared worker policy)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError, KafkaTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("turnstream.worker")

MAX_DELAY_S = 5.0
T = TypeVar("T")


async def retry_transient(what: str, step: Callable[[], Awaitable[T]]) -> T:
    """Run a step until Kafka and Redis take it: transient outages are waited out with
    backoff; permanent errors (wrong type, too large, not authorised) are raised at once.
    aiokafka's `KafkaTimeoutError` (a full batch for a partition whose broker stopped
    answering did not drain in one request timeout) says it is not retriable; it is an
    outage like the others."""
    delay = 0.1
    while True:
        try:
            return await step()
        except (RedisConnectionError, RedisTimeoutError, KafkaError) as err:
            if isinstance(err, KafkaError) and not transient(err):
                raise
            log.warning("%s failed (%r); retrying in %.1fs", what, err, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)


def transient(err: KafkaError) -> bool:
    return err.retriable or isinstance(err, KafkaTimeoutError)
