"""Ending a turn with an error before it reaches the engine (preprocessing, admission).

Same contract as the inference worker's ending: the outcome is durable (Kafka
`turns.completed`, the done marker) before the client hears of it, and a turn ends once:
when it already has an outcome, that outcome is relayed instead of the new error.
"""

from __future__ import annotations

import contextlib

from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import ErrorInfo, FinishReason, Timings, TurnCompleted, TurnSubmitted, Usage
from workers.runtime.relay import RelayPublisher
from workers.runtime.retry import retry_transient

DONE_TTL_S = 7 * 24 * 3600


def error_outcome(
    turn: TurnSubmitted, error: ErrorInfo, *, worker_id: str, now_ms: float, model: str = ""
) -> TurnCompleted:
    """The terminal event of a turn that failed before generating anything."""
    elapsed = round(now_ms - turn.submitted_at_ms, 3)
    return TurnCompleted(
        turn_id=turn.turn_id,
        conversation_id=turn.conversation_id,
        tenant_id=turn.tenant_id,
        user_id=turn.user_id,
        finish_reason=FinishReason.ERROR,
        text="",
        usage=Usage(0, 0),
        timings=Timings(queue_ms=elapsed, ttft_ms=None, e2e_ms=elapsed),
        model=model,
        worker_id=worker_id,
        completed_at_ms=now_ms,
        error=error,
    )


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
        if not stored:  # answered before (a redelivery): the first outcome stands
            earlier = await retry_transient("reading it", lambda: self._redis.get(done_key))
            with contextlib.suppress(DecodeError):
                event = decode(earlier) if earlier is not None else None
                if isinstance(event, TurnCompleted):
                    completed = event
        await self._relay.publish_confirmed(self._names.edge_channel(edge_id), completed)
