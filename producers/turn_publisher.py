"""Publishing accepted turns to Kafka from the edge, with an explicit answer on failure.

The producer starts in the background and reconnects on its own, so the edge keeps serving
(and says `broker_unavailable`, retryable) while Kafka is down instead of refusing to start.
A turn that comes before the first connection waits for it as long as it would wait for an
ack: an edge that has just started (or a broker that has just come up) does not refuse the
turns of its first second.
A turn counts as accepted only once Kafka acked it (acks=all); when the
ack does not come in time the client is told to retry, and a retry with the same
`client_turn_id` maps to the same turn id, so the worker answers it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from producers.errors import ProducerError
from runtime.cancelling import cancel_and_wait
from runtime.kafka_metadata import named_topics_only
from runtime.tracing.spans import producing
from schemas.codec import encode
from schemas.events import FeedbackGiven, SpeechDelivered, TurnSubmitted, TurnTruncated

log = logging.getLogger("turnstream.publisher")


class PublishFailed(ProducerError, RuntimeError):
    """Kafka did not take the turn (not connected, or no ack within the timeout)."""


class TurnPublisher:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        client_id: str,
        timeout_s: float,
        idempotent: bool = False,
        metadata_max_age_s: float = 300.0,
    ) -> None:
        self._bootstrap = bootstrap
        self._idempotent = idempotent
        self._metadata_max_age_s = metadata_max_age_s
        self._topic = topic
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._connector: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    async def start(self) -> None:
        self._connector = asyncio.create_task(self._connect_forever(), name="kafka-connect")

    async def wait_connected(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._connected.wait()
        return self._connected.is_set()

    async def _connect_forever(self) -> None:
        delay = 0.2
        while self._producer is None:
            # acks=all; idempotent only when asked: see workers.runtime.kafka.make_producer.
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap,
                client_id=self._client_id,
                acks="all",
                enable_idempotence=self._idempotent,
                metadata_max_age_ms=int(self._metadata_max_age_s * 1000),
                linger_ms=0,
                request_timeout_ms=int(self._timeout_s * 1000),
            )
            named_topics_only(producer.client)  # runtime.kafka_metadata
            try:
                await producer.start()
            except KafkaError as err:
                log.warning("Kafka unreachable (%s); retrying in %.1fs", err, delay)
                with contextlib.suppress(Exception):
                    await producer.stop()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._producer = producer
            self._connected.set()
            log.info("connected to Kafka at %s", self._bootstrap)

    async def publish(
        self,
        turn: TurnSubmitted | FeedbackGiven | TurnTruncated | SpeechDelivered,
        topic: str | None = None,
    ) -> None:
        """Publish an event keyed by its conversation (to `topic`, default: the turns')."""
        producer = self._producer
        if producer is None and await self.wait_connected(self._timeout_s):
            producer = self._producer
        if producer is None:
            raise PublishFailed("not connected to Kafka")
        topic = topic or self._topic
        # the current trace (the edge's turn span) goes along in the headers
        with producing(topic, turn_id=turn.turn_id) as headers:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await producer.send_and_wait(
                        topic, encode(turn), key=turn.conversation_id.encode(), headers=headers
                    )
            except (KafkaError, TimeoutError) as err:
                raise PublishFailed(f"Kafka did not acknowledge the turn: {err!r}") from err

    async def stop(self) -> None:
        if self._connector is not None:
            await cancel_and_wait([self._connector])
        if self._producer is not None:
            await self._producer.stop()
