"""The audit worker's queueing around the guard (no model, no broker: a recording producer)."""

from __future__ import annotations

from schemas.codec import decode
from schemas.events import SafetyStage, TraceRecorded
from tests.support.factories import completed, submitted
from workers.audit.policy import AuditPolicy
from workers.audit.queue import AuditQueue
from workers.audit.service import AUDIT_DROPPED, AuditConfig, AuditService


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.sent.append((topic, value))


def trace(turn_id: str) -> TraceRecorded:
    return TraceRecorded(
        turn_id=turn_id, submitted=submitted(turn_id), completed=completed(turn_id)
    )


async def test_a_turn_the_full_queue_drops_is_recorded_as_not_audited() -> None:
    producer = RecordingProducer()
    service = AuditService(
        guard=None,  # type: ignore[arg-type]  # never reached: nothing is taken from the queue
        queue=AuditQueue(1, "skip_new"),
        policy=AuditPolicy(),
        blacklist=None,  # type: ignore[arg-type]
        producer=producer,  # type: ignore[arg-type]
        config=AuditConfig(worker_id="w", verdicts_topic="verdicts", alerts_topic="alerts"),
        clock_ms=lambda: 1.0,
    )
    await service.handle(trace("t1"))
    await service.handle(trace("t2"))  # the queue holds t1: t2 is skipped
    [(topic, value)] = producer.sent
    verdict = decode(value)
    assert topic == "verdicts" and verdict.turn_id == "t2"
    assert verdict.stage == SafetyStage.AUDIT and verdict.error == AUDIT_DROPPED
    assert len(service.queue) == 1
