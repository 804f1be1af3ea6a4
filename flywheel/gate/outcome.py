"""The whole gate: score both runs, roll them up, compare, and the outcome the table and
the report show."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flywheel.errors import GateInputError
from flywheel.gate.compare import FAIL, Row, compare
from flywheel.gate.inputs import EvalSet, Run, check_inputs
from flywheel.gate.rollup import ItemScore, rollup
from flywheel.gate.rules import GateConfig
from flywheel.scoring import Embedder, Grade, Judge, TurnScore, grade_all, score_turns
from schemas.flywheel import (
    EvalItem,
    TurnResult,
)


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """Everything the table and the report show."""

    evalset: EvalSet
    baseline: Run
    candidate: Run
    config: GateConfig
    rows: list[Row]
    baseline_items: dict[str, ItemScore]
    candidate_items: dict[str, ItemScore]
    judge_misses: tuple[int, int] = (0, 0)

    @property
    def passed(self) -> bool:
        return not any(r.verdict == FAIL for r in self.rows)

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == FAIL]

    def scored_result(self, run: Run, item_id: str) -> TurnResult | None:
        return next((r for r in run.results if r.item_id == item_id and r.scored), None)


def scored_pairs(evalset: EvalSet, run: Run) -> list[tuple[EvalItem, TurnResult]]:
    return [(evalset.items[r.item_id], r) for r in run.results if r.scored]


async def judge_runs(
    judge: Judge, evalset: EvalSet, baseline: Run, candidate: Run, *, concurrency: int = 8
) -> tuple[list[Grade | None], list[Grade | None]]:
    """The judge's grade per result of each run (None for unscored turns and misses)."""
    out: list[list[Grade | None]] = []
    for run in (baseline, candidate):
        grades = iter(await grade_all(judge, scored_pairs(evalset, run), concurrency=concurrency))
        out.append([next(grades) if r.scored else None for r in run.results])
    return out[0], out[1]


def score_runs(
    evalset: EvalSet,
    baseline: Run,
    candidate: Run,
    *,
    embedder: Embedder | None = None,
    grades: tuple[Sequence[Grade | None], Sequence[Grade | None]] | None = None,
) -> tuple[list[TurnScore], list[TurnScore]]:
    """Both runs' turn scores, embedded in one batch (references are shared)."""
    results = baseline.results + candidate.results
    all_grades = list(grades[0]) + list(grades[1]) if grades is not None else None
    scores = score_turns(evalset.items, results, embedder=embedder, grades=all_grades)
    split = len(baseline.results)
    return scores[:split], scores[split:]


def evaluate(
    evalset: EvalSet,
    baseline: Run,
    candidate: Run,
    config: GateConfig,
    *,
    embedder: Embedder | None = None,
    grades: tuple[Sequence[Grade | None], Sequence[Grade | None]] | None = None,
) -> GateOutcome:
    """Check, score, roll up and compare: the gate without its command line."""
    check_inputs(evalset, baseline, candidate)
    b_scores, c_scores = score_runs(evalset, baseline, candidate, embedder=embedder, grades=grades)
    b_items, c_items = rollup(b_scores), rollup(c_scores)
    if not b_items.keys() & c_items.keys():
        raise GateInputError("the runs have no scored item in common")
    misses = (0, 0)
    if grades is not None:
        misses = tuple(  # type: ignore[assignment]
            sum(1 for r, g in zip(run.results, gs, strict=True) if r.scored and g is None)
            for run, gs in zip((baseline, candidate), grades, strict=True)
        )
    rows = compare(b_items, c_items, len(evalset.items), config)
    return GateOutcome(evalset, baseline, candidate, config, rows, b_items, c_items, misses)
