"""A turn's outcome is decided once, whichever step a crash cuts (real Kafka, real Redis).

A worker that dies after publishing `turns.completed` but before its done marker, or after
claiming the outcome but before publishing it, leaves the turn to a redelivery; the
redelivered try, whatever it would have answered itself, publishes the first try's bytes
and tells the client that answer. Kafka holds one answer, at worst the same record twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from harness.factories import completed
from harness.kafka import records_so_far
from runtime.kafka_topics import ensure_topics
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.events import ErrorInfo, FinishReason
from schemas.topics import TURNS_COMPLETED
from workers.runtime.kafka import make_producer
from workers.runtime.outcome import OutcomeRecorder
from workers.runtime.relay import RelayPublisher

pytestmark = pytest.mark.integration


class Crash(Exception):
    """The worker's process dies here."""


class CrashingProducer:
    """A producer that dies right before or right after its send reaches Kafka."""

    def __init__(self, producer, *, after_send: bool) -> None:
        self._producer = producer
        self._after_send = after_send

    async def send_and_wait(self, topic: str, value: bytes, key: bytes):
        if not self._after_send:
            raise Crash
        await self._producer.send_and_wait(topic, value, key)
        raise Crash


@pytest.fixture
async def settings(services: Settings) -> AsyncIterator[Settings]:
    namespaced = Settings.from_env(namespace=f"outcome-{uuid.uuid4().hex[:6]}")
    await ensure_topics(namespaced.kafka_bootstrap, namespaced.namespace)
    yield namespaced


@dataclass
class Parts:
    """What a worker records outcomes with: Redis, a Kafka producer, its running relay."""

    settings: Settings
    redis: Redis
    producer: AIOKafkaProducer
    relay: RelayPublisher

    def recorder(self, producer: object | None = None) -> OutcomeRecorder:
        return OutcomeRecorder(
            redis=self.redis,
            producer=producer or self.producer,  # type: ignore[arg-type]
            relay=self.relay,
            names=RedisNames.for_namespace(self.settings.namespace),
            completed_topic=TURNS_COMPLETED.full_name(self.settings.namespace),
        )


@pytest.fixture
async def parts(settings: Settings) -> AsyncIterator[Parts]:
    redis = redis_client(settings.redis_url)
    producer = make_producer(settings, "outcome-test")
    await producer.start()
    relay = RelayPublisher(redis, RedisNames.for_namespace(settings.namespace))
    sender = asyncio.create_task(relay.run())
    try:
        yield Parts(settings, redis, producer, relay)
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        await producer.stop()
        await redis.aclose()


async def recorded(settings: Settings, turn_id: str) -> list[bytes]:
    records = await records_so_far(
        settings.kafka_bootstrap,
        TURNS_COMPLETED.full_name(settings.namespace),
        lambda r: turn_id.encode() in r.value,
    )
    return [r.value for r in records]


@pytest.mark.parametrize("after_send", [False, True], ids=["before-publish", "after-publish"])
async def test_a_redelivery_records_the_first_tries_outcome_not_its_own(parts, after_send):
    settings, redis = parts.settings, parts.redis
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    first = completed(turn_id, text="the first answer", worker_id="w1", completed_at_ms=1.0)
    second = completed(turn_id, text="another answer", worker_id="w2", completed_at_ms=2.0)
    names = RedisNames.for_namespace(settings.namespace)
    dying = parts.recorder(CrashingProducer(parts.producer, after_send=after_send))
    with pytest.raises(Crash):
        await dying.record(first, "edge-1")
    assert await redis.get(names.done_key(turn_id)) is None  # the crash came first

    # the redelivery, as a worker sees it: no done marker, a decided outcome
    survivor = parts.recorder()
    done, decided = await redis.mget(names.done_key(turn_id), names.decided_key(turn_id))
    assert await survivor.replay(done, decided, "edge-2") == first
    # a racing try that generated its own answer is told the first one, publishes nothing
    assert await survivor.record(second, "edge-2") == first

    assert decode(await redis.get(names.done_key(turn_id))) == first
    assert await redis.get(names.decided_key(turn_id)) is None  # the marker answers now
    records = await recorded(settings, turn_id)
    assert set(records) == {encode(first)}  # one answer
    assert len(records) == (2 if after_send else 1)  # the same bytes, at worst twice


async def test_a_retryable_error_is_replaced_by_the_retrys_outcome(parts):
    turn_id = f"t-{uuid.uuid4().hex[:8]}"
    busy = completed(
        turn_id,
        text="",
        worker_id="w1",
        finish_reason=FinishReason.ERROR,
        error=ErrorInfo("conversation_busy", "another turn of the conversation runs", True),
    )
    answer = completed(turn_id, text="answered on retry", worker_id="w2", completed_at_ms=2.0)
    outcomes = parts.recorder()
    assert await outcomes.record(busy, "edge-1") == busy
    assert await outcomes.record(answer, "edge-1") == answer
    assert [decode(r) for r in await recorded(parts.settings, turn_id)] == [busy, answer]
