"""What the audit asks of a guard: one exchange in, a Llama Guard style answer out.

Two guards exist: `GuardModel` (Llama Guard through transformers, when its weights are on
the host: TURNSTREAM_AUDIT_MODEL_PATH) and `CategoryGuard` (the project's multilingual
category classifier reading the whole answer; the default, since no guard model can be
downloaded with the package). Both answer in Llama Guard's S-codes, so the policy and the
trace views read one taxonomy. `classify` runs in a thread and never raises.

`enforces`: whether the guard's unsafe verdicts may blacklist a user and raise alerts. Only
a guard whose false positives are rare should: the category classifier stops ~3% of safe
held-out texts, and flagged 11 of 200 benign benchmark answers, so three strikes in ten
minutes would blacklist an active, harmless user. Its verdicts are recorded all the same.

`rereads_windows`: whether the guard is the model the streaming check already read the
answer's windows with (the category classifier). Such a guard is not run on an answer whose
every window that model read and released (`coverage.read_whole_by_windows`): it would
read the same text with the same model a second time, to a verdict that acts on nobody.
"""

from __future__ import annotations

from typing import Protocol

from workers.audit.guard_prompt import GuardResult


class Guard(Protocol):
    name: str
    enforces: bool
    rereads_windows: bool

    def classify(self, user: str, assistant: str) -> GuardResult: ...
