"""Running a consumer service: start its clients and tasks, watch them, stop it cleanly.

Every worker role has the same life: producer and consumer start, the relay sender and the
consume loop (plus role-specific background tasks) run, a core task that dies marks the
service failed (its process exits and the supervisor restarts it), and on exit in-flight
turns drain before the clients close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from redis.asyncio import Redis

from runtime.cancelling import cancel_and_wait
from workers.runtime.relay import RelayPublisher

log = logging.getLogger("turnstream.worker")

RELAY_FLUSH_S = 5.0  # at a stop, how long the relay may take to send what it holds

S = TypeVar("S")


class Loop(Protocol):
    """What a service consumes with: `ConsumerLoop` (Kafka), `WorkListLoop` (a Redis list)."""

    topics: list[str]

    async def run(self) -> None: ...

    async def drain(self, timeout_s: float) -> None: ...


@dataclass
class RunningService(Generic[S]):
    service: S
    loop: Loop
    relay: RelayPublisher | None
    drain_s: float = 10.0  # on exit, how long in-flight turns may finish (0: drop them)
    failed: asyncio.Event = field(default_factory=asyncio.Event)  # a core task died


@contextlib.asynccontextmanager
async def run_service(
    service: S,
    *,
    loop: Loop,
    relay: RelayPublisher | None,
    redis: Redis,
    producer: AIOKafkaProducer | None,
    consumer: AIOKafkaConsumer | None,
    background: dict[str, Coroutine[Any, Any, None]] | None = None,
) -> AsyncIterator[RunningService[S]]:
    """`relay`, `producer`, `consumer`: None for a service without them (the safety worker
    reads a Redis list and answers over Redis pub/sub)."""
    if producer is not None:
        await producer.start()
    if consumer is not None:
        await consumer.start()
    helpers = [asyncio.create_task(relay.run(), name="relay")] if relay is not None else []
    helpers += [asyncio.create_task(c, name=n) for n, c in (background or {}).items()]
    consume = asyncio.create_task(loop.run(), name="consume")
    log.info("consuming %s", loop.topics)
    running = RunningService(service, loop, relay)

    def watch(task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            log.critical("core task %s ended: %r", task.get_name(), task.exception())
            running.failed.set()

    for task in [*helpers, consume]:
        task.add_done_callback(watch)
    try:
        yield running
    finally:
        await cancel_and_wait([consume])
        await loop.drain(timeout_s=running.drain_s)
        if relay is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RELAY_FLUSH_S):
                    await relay.flushed()
        await cancel_and_wait(helpers)
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()
        await redis.aclose()


async def serve_until_stopped(running: RunningService[Any], stop: asyncio.Event) -> None:
    """Block until the process is asked to stop or a core task of the service died."""
    stopping = asyncio.create_task(stop.wait())
    failing = asyncio.create_task(running.failed.wait())
    await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    failing.cancel()
    log.info("stopping: draining in-flight turns")
