"""One row per metric: baseline vs candidate over the paired items, and its verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flywheel.gate.metrics import (
    COVERAGE,
    EPS,
    METRICS,
    Metric,
    aggregate,
    metric_arrays,
    paired_bootstrap_p,
    worse_by,
)
from flywheel.gate.rollup import ItemScore
from flywheel.gate.rules import GateConfig, Rule

PASS, FAIL, WARN, NA, INFO = "pass", "FAIL", "warn", "n/a", "info"


@dataclass(frozen=True, slots=True)
class Row:
    """One metric's comparison: values over the paired items, and the verdict with why."""

    metric: str
    label: str
    unit: str
    higher_is_better: bool
    n: int
    baseline: float
    candidate: float
    p_value: float | None
    verdict: str
    reason: str
    rule: str

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def delta_pct(self) -> float:
        if self.baseline == 0:
            return 0.0 if self.delta == 0 else math.copysign(math.inf, self.delta)
        return self.delta / abs(self.baseline)


def judge_verdict(
    rule: Rule | None,
    *,
    higher_is_better: bool,
    baseline: float,
    candidate: float,
    p_value: float | None,
    alpha: float,
) -> tuple[str, str]:
    """(verdict, reason) of one metric under its rule (pure)."""
    if rule is None or not rule.enabled:
        return INFO, "no rule"
    if rule.floor is not None:
        broken = candidate < rule.floor if higher_is_better else candidate > rule.floor
        if broken:
            word = "below the floor" if higher_is_better else "above the ceiling"
            return FAIL, f"{candidate:.4g} is {word} {rule.floor:g}"
    if rule.max_worse is None:
        return PASS, "within bounds"
    worse = worse_by(higher_is_better, baseline, candidate)
    if rule.relative:
        if baseline != 0:
            worse /= abs(baseline)
        elif worse > EPS:
            worse = math.inf
    if worse <= rule.max_worse + EPS:
        return PASS, "within threshold"
    amount = f"{worse:.1%}" if rule.relative else f"{worse:.4g}"
    limit = f"{rule.max_worse:.0%}" if rule.relative else f"{rule.max_worse:g}"
    what = f"worse by {amount} > {limit}"
    if rule.hard:
        return FAIL, f"{what} (hard rule)"
    if p_value is None:
        return WARN, f"{what}, too few pairs to test"
    if p_value < alpha:
        return FAIL, f"{what}, p={p_value:.3g} < {alpha:g}"
    return WARN, f"{what}, not significant (p={p_value:.3g})"


def compare_metric(
    metric: Metric,
    baseline: dict[str, ItemScore],
    candidate: dict[str, ItemScore],
    paired: Sequence[str],
    config: GateConfig,
) -> Row:
    """One metric over the items both runs have a value for."""
    ids = [
        i
        for i in paired
        if getattr(baseline[i], metric.field) is not None
        and getattr(candidate[i], metric.field) is not None
    ]
    rule = config.rules.get(metric.name)
    common = {
        "metric": metric.name,
        "label": metric.label,
        "unit": metric.unit,
        "higher_is_better": metric.higher_is_better,
        "n": len(ids),
        "rule": rule.describe(metric.higher_is_better) if rule and rule.enabled else "-",
    }
    if not ids:
        return Row(
            **common,
            baseline=math.nan,
            candidate=math.nan,
            p_value=None,
            verdict=NA,
            reason="no items to compare",
        )
    base = metric_arrays(metric, baseline, ids)
    cand = metric_arrays(metric, candidate, ids)
    b, c = aggregate(metric, *base), aggregate(metric, *cand)
    p = (
        paired_bootstrap_p(metric, base, cand, resamples=config.resamples, seed=config.seed)
        if len(ids) >= config.min_pairs
        else None
    )
    verdict, reason = judge_verdict(
        rule,
        higher_is_better=metric.higher_is_better,
        baseline=b,
        candidate=c,
        p_value=p,
        alpha=config.alpha,
    )
    return Row(**common, baseline=b, candidate=c, p_value=p, verdict=verdict, reason=reason)


def compare_coverage(
    baseline: dict[str, ItemScore],
    candidate: dict[str, ItemScore],
    set_size: int,
    config: GateConfig,
) -> Row:
    """The share of the set's items each run answered (a run that lost items hides them)."""
    b, c = len(baseline) / set_size, len(candidate) / set_size
    rule = config.rules.get(COVERAGE)
    verdict, reason = judge_verdict(
        rule, higher_is_better=True, baseline=b, candidate=c, p_value=None, alpha=config.alpha
    )
    return Row(
        COVERAGE,
        "set items answered",
        "",
        True,
        set_size,
        b,
        c,
        None,
        verdict,
        reason,
        rule.describe(True) if rule and rule.enabled else "-",
    )


def compare(
    baseline: dict[str, ItemScore],
    candidate: dict[str, ItemScore],
    set_size: int,
    config: GateConfig,
) -> list[Row]:
    """Every metric, coverage first (pure)."""
    paired = sorted(baseline.keys() & candidate.keys())
    rows = [compare_coverage(baseline, candidate, set_size, config)]
    rows += [compare_metric(m, baseline, candidate, paired, config) for m in METRICS]
    return rows
