"""A check's `Verdict` as the `safety.verdict` event recorded on Kafka (pure), the same way
for the input screen and the output check."""

from __future__ import annotations

from typing import Protocol

from moderation.verdict import Verdict
from schemas.events import SafetyAction, SafetyStage, SafetyVerdict

MAX_EVIDENCE_CHARS = 2000  # of refused text, kept with its verdict for audits
CLASSIFIER_SCORE = "harm"  # in a verdict's scores when the category classifier read the text


class TurnOwner(Protocol):
    @property
    def turn_id(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def tenant_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...


def verdict_event(
    owner: TurnOwner,
    stage: SafetyStage,
    verdict: Verdict,
    *,
    judged_text: str,
    checker: str,
    now_ms: float,
    window: int = -1,
) -> SafetyVerdict:
    """The event; the judged text is kept (capped) only when it was refused."""
    action = SafetyAction(str(verdict.action))
    refused = action in (SafetyAction.BLOCK, SafetyAction.CUT)
    return SafetyVerdict(
        turn_id=owner.turn_id,
        conversation_id=owner.conversation_id,
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        stage=stage,
        action=action,
        labels=list(verdict.labels),
        scores={k: round(v, 4) for k, v in verdict.scores.items()},
        window=window,
        text=judged_text[:MAX_EVIDENCE_CHARS] if refused else "",
        checker=checker,
        elapsed_ms=round(verdict.elapsed_ms, 3),
        at_ms=now_ms,
        error=verdict.error or "",
    )


def released_by_classifier(event: SafetyVerdict) -> bool:
    """A window the category classifier read without error, and released."""
    read = not event.error and CLASSIFIER_SCORE in event.scores
    return read and event.action == SafetyAction.RELEASE
