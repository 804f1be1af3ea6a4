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

from workers.safety.rules import RULES_VERSION, RuleMatch


class Action(StrEnum):
    ALLOW = "allow"
    BLOCK = "block"
    RELEASE = "release"
    CUT = "cut"


# What the user is told, by the most serious label first; the matched text is not echoed.
_REASONS: tuple[tuple[str, str], ...] = (
    (
        "self_harm",
        "I can't help with that. If you are thinking about hurting yourself, please reach out "
        "to someone you trust or a local crisis line right now; you don't have to face this "
        "alone.",
    ),
    ("blacklisted_user", "This account can't send messages to the assistant right now."),
    ("blacklisted_content", "This message has been blocked."),
    ("violence", "I can't help with hurting someone."),
    ("weapons", "I can't help with making weapons or explosives."),
    ("drugs", "I can't help with making illegal drugs."),
    ("malware", "I can't help with creating malicious software."),
    ("secret_leak", "The answer was stopped because it contained what looks like a secret key."),
    ("hate", "I can't help with hateful content."),
    ("abuse", "Let's keep this respectful; I'm happy to help with something else."),
    ("profanity", "Let's keep this respectful; I'm happy to help with something else."),
    (
        "injection",
        "This message looks like an attempt to override the assistant's instructions, so it "
        "was not processed.",
    ),
    (
        "jailbreak",
        "This message looks like an attempt to switch off the assistant's safeguards, so it "
        "was not processed.",
    ),
    (
        "smuggling",
        "This message asks to follow hidden or encoded instructions, so it was not processed.",
    ),
)
_DEFAULT_REASON = "This content was blocked by the safety checks."


def reason_for(labels: tuple[str, ...]) -> str:
    """The user-facing sentence for a stopped turn or answer (empty when nothing fired)."""
    if not labels:
        return ""
    for label, text in _REASONS:
        if label in labels:
            return text
    return _DEFAULT_REASON


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
