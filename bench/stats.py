"""Percentiles and the added-latency comparison of a benchmark (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric at one percentile: the engine alone vs through the pipeline."""

    metric: str
    q: float
    direct_ms: float
    pipeline_ms: float

    @property
    def added_ms(self) -> float:
        return self.pipeline_ms - self.direct_ms

    @property
    def ratio(self) -> float:
        return self.pipeline_ms / self.direct_ms if self.direct_ms > 0 else math.inf


def compare(
    metric: str, direct: Sequence[float], pipeline: Sequence[float], qs=(50, 99)
) -> list[Comparison]:
    return [Comparison(metric, q, percentile(direct, q), percentile(pipeline, q)) for q in qs]


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p99 and max of a sample (the benchmarks' JSON rows)."""
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
    }
