"""What the audit asks of a guard: one exchange in, a Llama Guard style answer out.

Two guards exist: `GuardModel` (Llama Guard through transformers, when its weights are on
the host: TURNSTREAM_AUDIT_MODEL_PATH) and `CategoryGuard` (the project's multilingual
category classifier reading the whole answer; the default, since no guard model can be
downloaded with the package). Both answer in Llama Guard's S-codes, so the policy and the
trace views read one taxonomy. `classify` runs in a thread and never raises.
"""

from __future__ import annotations

from typing import Protocol

from workers.audit.guard_prompt import GuardResult


class Guard(Protocol):
    name: str

    def classify(self, user: str, assistant: str) -> GuardResult: ...
