"""The gate's table for a terminal."""

from __future__ import annotations

import math

from flywheel.gate.compare import Row
from flywheel.gate.outcome import GateOutcome


def fmt_value(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "ms":
        return f"{value:.1f}ms"
    if unit == "$":
        return f"${value:.6f}"
    if unit == "tok":
        return f"{value:.1f}"
    return f"{value:.4f}"


def fmt_delta(row: Row) -> str:
    if math.isnan(row.baseline) or math.isnan(row.candidate):
        return "-"
    if row.unit in ("ms", "$", "tok"):
        pct = row.delta_pct
        return f"{pct:+.1%}" if math.isfinite(pct) else ("+inf" if pct > 0 else "-inf")
    return f"{row.delta:+.4f}"


def format_table(outcome: GateOutcome) -> str:
    """The metric table and the verdict line, as the CLI prints them."""
    head = ("metric", "n", "baseline", "candidate", "delta", "p", "verdict", "why")
    lines = [
        (
            r.metric,
            str(r.n),
            fmt_value(r.baseline, r.unit),
            fmt_value(r.candidate, r.unit),
            fmt_delta(r),
            "-" if r.p_value is None else f"{r.p_value:.4f}",
            r.verdict,
            r.reason,
        )
        for r in outcome.rows
    ]
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head) - 1)]
    out = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(x[:-1], widths, strict=True))
        )
        + "  "
        + x[-1]
        for x in [head, *lines]
    ]
    b, c = outcome.baseline.manifest, outcome.candidate.manifest
    header = [
        f"set {outcome.evalset.path} ({len(outcome.evalset.items)} items)",
        f"baseline  {b.run_id} ({b.candidate.name}): {len(outcome.baseline_items)} items answered",
        f"candidate {c.run_id} ({c.candidate.name}): {len(outcome.candidate_items)} items answered",
        f"one-sided paired bootstrap, {outcome.config.resamples} resamples, seed "
        f"{outcome.config.seed}, alpha {outcome.config.alpha:g}",
    ]
    if any(outcome.judge_misses):
        header.append(
            f"judge: no grade for {outcome.judge_misses[0]} baseline and "
            f"{outcome.judge_misses[1]} candidate turns"
        )
    failed = outcome.failed
    verdict = (
        "GATE PASS"
        if not failed
        else f"GATE FAIL: {', '.join(r.metric for r in failed)} worse than the baseline"
    )
    return "\n".join([*header, "", *out, "", verdict])
