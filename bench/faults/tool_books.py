"""The tool scenario's books (pure): every side effect of the deployment's tools counted
against the calls the clients saw, the way an auditor would.

Per call (by its idempotency key, which the key-value server writes beside each effect):
- effects: the server's own count of writes with that key (its books file);
- outcome: what the tools worker's books recorded (`ok`, `cancelled`, `tool_outcome_unknown`,
  an error code; "" when nothing was recorded).

They balance when every question reached its final answer at its client, no call took
effect twice, a call recorded `ok` took effect exactly once, a call recorded `cancelled`
before it ran took none, and the fault struck a call in flight (a fault that hit nothing
proves nothing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SideEffectBooks:
    questions: int = 0
    answered: int = 0  # questions whose client saw the final answer (after every tool round)
    calls: int = 0
    effects: Counter[str] = field(default_factory=Counter)  # per idempotency key
    outcomes: dict[str, str] = field(default_factory=dict)  # per idempotency key
    struck: list[str] = field(default_factory=list)  # what the fault hit, in words
    regenerated: int = 0  # questions sent again (same client_turn_id): answers replayed
    redelivered: int = 0  # tools.requested records delivered a second time
    stopped: int = 0  # continuations the user cancelled while (or before) their call ran

    def twice(self) -> list[str]:
        return sorted(k for k, n in self.effects.items() if n > 1)

    def lost(self) -> list[str]:
        """Calls recorded as run whose effect the server never made."""
        return sorted(k for k, o in self.outcomes.items() if o == "ok" and self.effects[k] != 1)

    def phantom(self) -> list[str]:
        """Effects of calls that no client saw, or that were recorded as not run."""
        return sorted(
            k
            for k, n in self.effects.items()
            if n and (k not in self.outcomes or self.outcomes[k] == "cancelled")
        )

    def unknown(self) -> int:
        return sum(o == "tool_outcome_unknown" for o in self.outcomes.values())

    @property
    def balanced(self) -> bool:
        return (
            self.answered == self.questions > 0
            and not self.twice()
            and not self.lost()
            and not self.phantom()
            and bool(self.struck)
        )

    def problems(self) -> list[str]:
        found = []
        if self.answered != self.questions:
            found.append(f"{self.questions - self.answered} questions never ended")
        found += [f"{k} took effect {self.effects[k]} times" for k in self.twice()]
        found += [f"{k} recorded ok, {self.effects[k]} effects" for k in self.lost()]
        found += [f"{k}: an effect nobody asked for" for k in self.phantom()]
        if not self.struck:
            found.append("the kill struck no call in flight")
        return found

    def line(self) -> str:
        outcomes = Counter(self.outcomes.values())
        return (
            f"tools-kill: {self.answered}/{self.questions} questions ended, {self.calls} calls, "
            f"{sum(self.effects.values())} effects (max {max(self.effects.values(), default=0)} "
            f"per call), outcomes {dict(outcomes)}, {self.regenerated} regenerated, "
            f"{self.redelivered} redelivered, {self.stopped} stopped; struck: "
            f"{'; '.join(self.struck) or 'nothing'} → "
            f"{'balanced' if self.balanced else 'NOT balanced: ' + '; '.join(self.problems())}"
        )
