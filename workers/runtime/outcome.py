"""Recording how a turn ended, the same way for every stage that can end one.

A turn is decided once, then recorded, then told: its outcome is claimed in Redis (the
decided key, SET NX GET), the claimed bytes are published to Kafka `turns.completed`, the
done marker is set (and the claim dropped), and only then does the client hear of it. A
redelivery or a racing retry finds the claim (or the marker) and publishes the claimed
bytes, never an outcome of its own, so a crash anywhere in between leaves one answer: at
worst the same record twice (a crash after the publish, before the marker), which the
history and the trace read as one (the sink's `turns` table then holds the identical row
twice). Only a retryable error may be replaced. An answer that called the deployment's
tools (its `continuation` set) is published to `tools.requested` first, from the same
decided bytes, so the calls the tools worker runs are the ones every retry records.
`error_outcome` builds the ending of a turn that failed before reaching the engine.
"""

from __future__ import annotations

from typing import Any

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


def final_outcome(recorded: bytes | None) -> TurnCompleted | None:
    """The outcome these stored bytes hold, if it is final (a retryable error is not: a
    retry's outcome replaces it; unreadable bytes are no outcome)."""
    if recorded is None:
        return None
    try:
        event = decode(recorded)
    except DecodeError:
        return None
    if not isinstance(event, TurnCompleted):
        return None
    if event.error is not None and event.error.retryable:
        return None
    return event


class OutcomeRecorder:
    def __init__(
        self,
        *,
        redis: Redis,
        producer: AIOKafkaProducer,
        relay: RelayPublisher,
        names: RedisNames,
        completed_topic: str,
        tools_topic: str = "",
    ) -> None:
        self._redis = redis
        self._producer = producer
        self._relay = relay
        self._names = names
        self._topic = completed_topic
        self._tools_topic = tools_topic

    async def record(self, completed: TurnCompleted, edge_id: str) -> TurnCompleted:
        """Decide, publish, mark, tell; returns what was told (an earlier final outcome,
        if the turn had one)."""
        payload = encode(completed)
        decided_key = self._names.decided_key(completed.turn_id)
        done_key = self._names.done_key(completed.turn_id)

        async def claim() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                # SET NX GET: set it if nobody did, and say what was there (None: ours now)
                pipe.set(decided_key, payload, ex=DONE_TTL_S, nx=True, get=True)
                pipe.get(done_key)
                return await pipe.execute()

        decided_raw, done_raw = await retry_transient("deciding the outcome", claim)
        claimed = decided_raw is None
        done = final_outcome(done_raw)
        if done is not None:  # recorded before (a racing retry): nothing to publish
            if claimed:  # the claim we just made is moot: the done marker answers
                await retry_transient("withdrawing", lambda: self._redis.delete(decided_key))
            await self._relay.publish_confirmed(self._names.edge_channel(edge_id), done)
            return done
        decided = final_outcome(decided_raw)
        if not claimed and decided is not None:  # a redelivery: the first try's bytes
            completed, payload = decided, decided_raw
        elif not claimed:  # a retryable error is not final: this outcome replaces it
            await retry_transient(
                "deciding the outcome",
                lambda: self._redis.set(decided_key, payload, ex=DONE_TTL_S),
            )
        key = completed.conversation_id.encode()
        if completed.continuation is not None and self._tools_topic:
            await retry_transient(
                "publishing tools.requested",
                lambda: self._producer.send_and_wait(self._tools_topic, payload, key),
            )
        await retry_transient(
            "publishing turns.completed",
            lambda: self._producer.send_and_wait(self._topic, payload, key),
        )

        async def mark() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.set(done_key, payload, ex=DONE_TTL_S)
                pipe.delete(decided_key)  # the done marker answers from now on
                await pipe.execute()

        await retry_transient("recording the outcome", mark)
        await self._relay.publish_confirmed(self._names.edge_channel(edge_id), completed)
        return completed

    async def replay(
        self, recorded: bytes | None, decided: bytes | None, edge_id: str
    ) -> TurnCompleted | None:
        """A turn that already ended (redelivered, retried): its outcome goes to the edge
        that asked, which may be another one than the first time, and a recording that a
        crash cut short is finished with the decided bytes. `recorded`, `decided`: the
        turn's done marker and decided key. None: nothing final; the caller runs the turn."""
        done = final_outcome(recorded)
        if done is not None:
            await self._relay.publish_confirmed(self._names.edge_channel(edge_id), done)
            return done
        cut_short = final_outcome(decided)
        if cut_short is None:
            return None
        return await self.record(cut_short, edge_id)
