"""`read_whole_by_windows`: the audit's category guard skips only answers the streaming
check read whole with the same classifier and released, and the audit service acts on it
only for a guard that is that classifier."""

from __future__ import annotations

import msgspec
import pytest

from harness.factories import completed, submitted
from schemas.codec import decode
from schemas.events import OutputSafety, SafetyStage, TraceRecorded, TurnCompleted
from tests.unit.workers.audit.test_audit_service import RecordingProducer, ScriptedGuard, service
from workers.audit.coverage import read_whole_by_windows
from workers.audit.guard_prompt import GuardResult
from workers.audit.ledger import AuditLedger


def answer(windows: int = 2, **safety) -> TurnCompleted:
    summary = OutputSafety(
        policy="optimistic", windows=windows, released=windows, classified=windows
    )
    return completed("t", output_safety=msgspec.structs.replace(summary, **safety))


def test_an_answer_whose_every_window_the_classifier_released_was_read_whole():
    assert read_whole_by_windows(answer())


@pytest.mark.parametrize(
    ("case", "turn"),
    [
        ("not checked", completed("t")),
        ("no window", answer(windows=0)),
        ("unaudited", answer(unaudited=True)),
        ("cut", answer(cut_window=1, released=1, classified=1)),
        ("not all released", answer(released=1, classified=1)),
        ("a window the classifier failed on, or rules only", answer(classified=1)),
    ],
)
def test_anything_short_of_that_is_audited(case: str, turn: TurnCompleted):
    assert not read_whole_by_windows(turn), case


def _trace(turn: TurnCompleted) -> TraceRecorded:
    return TraceRecorded(turn_id="t", submitted=submitted("t"), completed=turn)


async def test_the_classifiers_own_guard_skips_a_covered_answer_and_reads_the_rest() -> None:
    producer = RecordingProducer()
    guard = ScriptedGuard(GuardResult(safe=True))
    guard.rereads_windows = True
    audit = service(guard, producer, AuditLedger(), now=2.0)
    await audit.handle(_trace(answer()))
    assert guard.calls == [] and producer.sent == [] and audit.covered == 1
    await audit.handle(_trace(answer(unaudited=True)))
    assert len(guard.calls) == 1 and audit.covered == 1
    assert decode(producer.sent[0][1]).stage == SafetyStage.AUDIT


async def test_a_second_model_reads_every_answer_even_a_covered_one() -> None:
    producer = RecordingProducer()
    guard = ScriptedGuard(GuardResult(safe=True))  # rereads_windows False: Llama Guard
    audit = service(guard, producer, AuditLedger(), now=2.0)
    await audit.handle(_trace(answer()))
    assert len(guard.calls) == 1 and len(producer.sent) == 1 and audit.covered == 0
