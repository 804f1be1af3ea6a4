"""The default audit guard: the category classifier on the whole answer, in S-codes.

The streaming check read the answer in ~50-token windows as it was generated; the audit
reads all of it after the fact, in PIECE_CHARS pieces twice, the second time shifted by half
a piece (so a sentence on a piece's edge is read whole in the other), up to MAX_PIECES each
(~12 KiB, more than a turn's answer). Pieces are small because a sentence encoder averages:
one harmful sentence inside 400 characters of museum opening hours read as safe. The answer
is judged, as Llama Guard judges the last Agent message, and only the answer: a refused
harmful request is a safe exchange, and the request's own scores are already in its input
verdict (reading it again cost a classifier reading per turn). Prompt injection is not a
hazard category of the taxonomy, so an answer the classifier reads as injection is recorded
in `scores`, not flagged.
"""

from __future__ import annotations

from moderation.categories.chunks import chunks
from moderation.categories.classifier import CategoryClassifier, shared, worst_of
from workers.audit.guard_prompt import GuardResult, clean_text, guard_error

PIECE_CHARS = 200
MAX_PIECES = 64
# Our categories in the Llama Guard 3 taxonomy (workers/audit/guard_prompt.CATEGORIES).
S_CODES: dict[str, str] = {
    "violence_weapons": "S1",  # violent crimes (weapons of mass harm would be S9)
    "threats": "S1",
    "self_harm": "S11",
    "sexual": "S12",
    "sexual_minors": "S4",
    "hate": "S10",
    "drugs": "S2",
    "privacy": "S7",
}
NAME = "category-classifier"


def pieces(text: str) -> list[str]:
    """`text` in PIECE_CHARS pieces, then again from half a piece in."""
    whole = chunks(text, size=PIECE_CHARS, limit=MAX_PIECES)
    if len(text) <= PIECE_CHARS:
        return whole
    return whole + chunks(text[PIECE_CHARS // 2 :], size=PIECE_CHARS, limit=MAX_PIECES)


class CategoryGuard:
    name = NAME
    enforces = False  # too many false positives to blacklist on (workers/audit/guard.py)
    rereads_windows = True  # the streaming check's own classifier (workers/audit/coverage.py)

    def __init__(self, classifier: CategoryClassifier | None = None) -> None:
        self.classifier = classifier or shared()

    def warm_up(self) -> None:
        self.classifier.warm_up()

    def classify(self, user: str, assistant: str) -> GuardResult:
        """The worst piece of the answer decides; never raises."""
        try:
            answer = pieces(clean_text(assistant, MAX_PIECES * PIECE_CHARS))
            said = worst_of(self.classifier.judge_many(answer))
        except Exception as exc:
            return guard_error(exc)
        scores: dict[str, float] = {}
        if said is not None:
            scores["harm"] = round(said.harm, 4)
            scores["harm_threshold"] = round(said.threshold, 4)
        code = S_CODES.get(said.label or "") if said is not None else None
        if code is None:
            return GuardResult(safe=True, raw="safe", scores=scores)
        return GuardResult(safe=False, categories=(code,), raw=f"unsafe\n{code}", scores=scores)
