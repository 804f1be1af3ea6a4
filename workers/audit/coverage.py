"""Whether the streaming check already read a whole answer with the category classifier
(pure): then the audit's category guard, the same model, has nothing to add.

The output windows overlap (`moderation.windows`), so together they hold every character
of the answer; each was read whole (a window is far under the check's head and tail caps).
The answer counts as read only when every window sent was released by a check that ran the
classifier without error (`OutputSafety.classified`, counted by the inference worker from
the verdicts it received): a cut answer, an answer the optimistic policy let through
without a verdict (`unaudited`) or one whose classifier failed on some window is audited
as before.
"""

from __future__ import annotations

from schemas.events import TurnCompleted


def read_whole_by_windows(completed: TurnCompleted) -> bool:
    safety = completed.output_safety
    if safety is None or safety.windows < 1 or safety.unaudited or safety.cut_window >= 0:
        return False
    return safety.released == safety.windows == safety.classified
