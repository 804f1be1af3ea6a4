"""Each item's rollup over a run's scored turns: what the gate compares, paired by item."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from flywheel.errors import GateInputError
from flywheel.scoring import TurnScore


@dataclass(frozen=True, slots=True)
class ItemScore:
    """One item in one run: quality from its scored turn; `ok`, cost and tokens over all of
    its turns (an item's earlier turns cost money too); latency of the scored turn."""

    item_id: str
    turns: int
    ok: float
    ttft_ms: float | None
    e2e_ms: float
    cost_usd: float
    tokens: float
    reference_f1: float | None = None
    exact: float | None = None
    similarity: float | None = None
    refused: float | None = None
    safe: float | None = None
    judge: float | None = None
    judge_rationale: str = ""


def rollup(scores: Sequence[TurnScore]) -> dict[str, ItemScore]:
    """Item id → its rollup. Items without a scored turn are left out (not answered); two
    scored turns for one item are an error (a duplicated result)."""
    by_item: dict[str, list[TurnScore]] = defaultdict(list)
    for s in scores:
        by_item[s.item_id].append(s)
    out: dict[str, ItemScore] = {}
    for item_id, turns in by_item.items():
        scored = [t for t in turns if t.scored]
        if len(scored) > 1:
            raise GateInputError(f"item {item_id!r} has {len(scored)} scored results")
        if not scored:
            continue
        last = scored[0]
        out[item_id] = ItemScore(
            item_id=item_id,
            turns=len(turns),
            ok=float(all(t.ok for t in turns)),
            ttft_ms=last.ttft_ms,
            e2e_ms=last.e2e_ms,
            cost_usd=sum(t.cost_usd for t in turns),
            tokens=float(sum(t.tokens for t in turns)),
            reference_f1=last.reference_f1,
            exact=last.exact,
            similarity=last.similarity,
            refused=last.refused,
            safe=last.safe,
            judge=last.judge,
            judge_rationale=last.judge_rationale,
        )
    return out
