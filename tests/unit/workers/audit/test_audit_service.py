"""The audit worker around its guard (no broker: a recording producer; a scripted guard):
a verdict is on Kafka before `handle` returns (so the offset commits only after it), the
guard's scores travel with it, and a turn past the max lag is recorded as skipped."""

from __future__ import annotations

from harness.factories import completed, submitted
from schemas.codec import decode
from schemas.events import SafetyAction, SafetyStage, TraceRecorded
from workers.audit.guard_prompt import GuardResult
from workers.audit.ledger import AuditLedger
from workers.audit.policy import AuditPolicy
from workers.audit.service import AUDIT_SKIPPED, AuditConfig, AuditService


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self.sent.append((topic, value))


class ScriptedGuard:
    name = "scripted"
    enforces = True
    rereads_windows = False

    def __init__(self, result: GuardResult) -> None:
        self.result = result
        self.calls: list[tuple[str, str]] = []

    def classify(self, user: str, assistant: str) -> GuardResult:
        self.calls.append((user, assistant))
        return self.result


def trace(turn_id: str, completed_at_ms: float = 0.0) -> TraceRecorded:
    return TraceRecorded(
        turn_id=turn_id,
        submitted=submitted(turn_id),
        completed=completed(turn_id, completed_at_ms=completed_at_ms),
    )


def service(guard: ScriptedGuard, producer: RecordingProducer, ledger: AuditLedger, now: float):
    return AuditService(
        guard=guard,
        ledger=ledger,
        policy=AuditPolicy(),
        blacklist=None,  # type: ignore[arg-type]  # one unsafe turn blacklists nobody
        producer=producer,  # type: ignore[arg-type]
        config=AuditConfig(worker_id="w", verdicts_topic="verdicts", alerts_topic="alerts"),
        clock_ms=lambda: now,
    )


async def test_the_verdict_is_sent_before_handle_returns_with_the_guards_scores() -> None:
    producer = RecordingProducer()
    guard = ScriptedGuard(GuardResult(safe=False, categories=("S1",), scores={"harm": 1.5}))
    audit = service(guard, producer, AuditLedger(), now=2500.0)
    await audit.handle(trace("t1", completed_at_ms=1000.0))
    [(topic, value)] = producer.sent
    verdict = decode(value)
    assert topic == "verdicts" and verdict.turn_id == "t1" and verdict.stage == SafetyStage.AUDIT
    assert verdict.action == SafetyAction.BLOCK and verdict.labels == ["S1"]
    assert verdict.scores == {"harm": 1.5, "lag_ms": 1500.0}
    assert verdict.checker == "w/scripted"
    assert len(guard.calls) == 1 and audit.ledger.audited == 1


async def test_a_turn_past_the_max_lag_is_recorded_as_skipped_not_judged() -> None:
    producer = RecordingProducer()
    guard = ScriptedGuard(GuardResult(safe=True))
    audit = service(guard, producer, AuditLedger(max_lag_ms=1000), now=5000.0)
    await audit.handle(trace("late", completed_at_ms=1000.0))
    await audit.handle(trace("fresh", completed_at_ms=4500.0))
    late, fresh = (decode(value) for _, value in producer.sent)
    assert late.turn_id == "late" and late.error == AUDIT_SKIPPED
    assert late.action == SafetyAction.ALLOW  # not judged: no block, the error says why
    assert fresh.turn_id == "fresh" and not fresh.error
    assert len(guard.calls) == 1 and audit.ledger.skipped == 1


class FakeBlacklist:
    def __init__(self) -> None:
        self.users: list[str] = []

    async def add_user(self, user: str, ttl_s: float) -> None:
        self.users.append(user)


async def _audit_unsafe_turns(enforces: bool) -> tuple[FakeBlacklist, RecordingProducer]:
    producer, blacklist = RecordingProducer(), FakeBlacklist()
    guard = ScriptedGuard(GuardResult(safe=False, categories=("S4",)))
    guard.enforces = enforces
    audit = service(guard, producer, AuditLedger(), now=2000.0)
    audit.blacklist = blacklist  # type: ignore[assignment]
    for i in range(4):  # one user (the factories'), four unsafe turns in a minute
        await audit.handle(trace(f"t{i}", completed_at_ms=1000.0))
    return blacklist, producer


async def test_an_enforcing_guards_repeated_unsafe_turns_blacklist_and_alert() -> None:
    blacklist, producer = await _audit_unsafe_turns(enforces=True)
    assert len(blacklist.users) == 1
    assert any(topic == "alerts" for topic, _ in producer.sent)


async def test_a_noisy_guards_unsafe_turns_are_recorded_but_blacklist_and_alert_nobody() -> None:
    blacklist, producer = await _audit_unsafe_turns(enforces=False)
    assert blacklist.users == []
    topics = [topic for topic, _ in producer.sent]
    assert topics == ["verdicts"] * 4  # every turn's verdict, no alert
    assert all(decode(v).action == SafetyAction.BLOCK for _, v in producer.sent)
