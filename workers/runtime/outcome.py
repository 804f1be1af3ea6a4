"""Recording how a turn ended, the same way for every stage that can end one.

The outcome is durable (Kafka `turns.completed`, then the done marker in Redis) before the
client hears of it, and a turn ends once: when it already has a final outcome (a redelivery
raced), that outcome is relayed instead; only a retryable error may be replaced.
`error_outcome` builds the ending of a turn that failed before reaching the engine.
"""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import (
    ErrorInfo,
    FinishReason,
    SafetyVerdict,
    Screening,
    Timings,
    TurnCompleted,
    TurnSubmitted,
    Usage,
)
from workers.runtime.relay import RelayPublisher
from workers.runtime.retry import retry_transient

DONE_TTL_S = 7 * 24 * 3600


def error_outcome(
    turn: TurnSubmitted,
    error: ErrorInfo,
    *,
    worker_id: str,
    now_ms: float,
    model: str = "",
    finish_reason: FinishReason = FinishReason.ERROR,
    screening: Screening | None = None,
    verdicts: list[SafetyVerdict] | None = None,
) -> TurnCompleted:
    """The terminal event of a turn that ended before generating anything (failed, or
    refused by the input screen: `finish_reason` safety, with its `screening` and the
    verdict for the events log)."""
    elapsed = round(now_ms - turn.submitted_at_ms, 3)
    return TurnCompleted(
        turn_id=turn.turn_id,
        conversation_id=turn.conversation_id,
        tenant_id=turn.tenant_id,
        user_id=turn.user_id,
        finish_reason=finish_reason,
        text="",
        usage=Usage(0, 0),
        timings=Timings(queue_ms=elapsed, ttft_ms=None, e2e_ms=elapsed),
        model=model,
        worker_id=worker_id,
        completed_at_ms=now_ms,
        error=error,
        screening=screening,
        verdicts=verdicts or [],
    )


def _retryable(completed: TurnCompleted) -> bool:
    return completed.error is not None and completed.error.retryable


class OutcomeRecorder:
    def __init__(
        self,
        *,
        redis: Redis,
        producer: AIOKafkaProducer,
        relay: RelayPublisher,
        names: RedisNames,
        completed_topic: str,
    ) -> None:
        self._redis = redis
        self._producer = producer
        self._relay = relay
        self._names = names
        self._topic = completed_topic

    async def record(self, completed: TurnCompleted, edge_id: str) -> None:
        payload = encode(completed)
        key = completed.conversation_id.encode()
        done_key = self._names.done_key(completed.turn_id)
        await retry_transient(
            "publishing turns.completed",
            lambda: self._producer.send_and_wait(self._topic, payload, key),
        )
        stored = await retry_transient(
            "recording the outcome",
            lambda: self._redis.set(done_key, payload, ex=DONE_TTL_S, nx=True),
        )
        if not stored:  # answered before (a redelivery): a final outcome stands
            earlier = await retry_transient("reading it", lambda: self._redis.get(done_key))
            event = None
            with contextlib.suppress(DecodeError):
                event = decode(earlier) if earlier is not None else None
            if isinstance(event, TurnCompleted) and not _retryable(event):
                completed = event
            else:  # a retryable error is not final: this attempt's outcome replaces it
                await retry_transient(
                    "recording the outcome",
                    lambda: self._redis.set(done_key, payload, ex=DONE_TTL_S),
                )
        await self._relay.publish_confirmed(self._names.edge_channel(edge_id), completed)
