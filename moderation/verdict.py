"""A screen's decision, what the worker acts on and what the trace records.

`action` is `allow`/`block` for a user turn and `release`/`cut` for an answer window.
`error` names what failed (`classifier_error`, `blacklist_unavailable`, `screen_error`,
comma-joined when several did): the action then reflects only the checks that ran, and the
caller applies its fail-open or fail-closed policy. A screen never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from moderation.language import DEFAULT
from moderation.replies import reply
from moderation.rules import RULES_VERSION, RuleMatch


class Action(StrEnum):
    ALLOW = "allow"
    BLOCK = "block"
    RELEASE = "release"
    CUT = "cut"


def reason_for(labels: tuple[str, ...], lang: str = DEFAULT) -> str:
    """The user-facing sentence for a stopped turn or answer, in `lang` where the reply
    table has it (empty when nothing fired); see `replies.py`."""
    return reply(labels, lang)


@dataclass(frozen=True, slots=True)
class Verdict:
    stage: str  # "input" or "output"
    action: Action
    labels: tuple[str, ...] = ()
    scores: dict[str, float] = field(default_factory=dict)
    matches: tuple[RuleMatch, ...] = ()
    reason: str = ""
    elapsed_ms: float = 0.0
    error: str | None = None
    error_detail: str | None = None
    rules_version: str = RULES_VERSION

    @property
    def stopped(self) -> bool:
        """True for block and cut: the turn or the rest of the answer does not go out."""
        return self.action in (Action.BLOCK, Action.CUT)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record for traces (matched text included: it is the evidence)."""
        return {
            "stage": self.stage,
            "action": str(self.action),
            "labels": list(self.labels),
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
            "matches": [
                {"rule": m.rule, "label": m.label, "view": m.view, "text": m.text}
                for m in self.matches
            ],
            "reason": self.reason,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "error": self.error,
            "error_detail": self.error_detail,
            "rules_version": self.rules_version,
        }
