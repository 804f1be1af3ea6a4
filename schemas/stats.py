"""The nearest-rank percentile everyone reports with (pure): what ClickHouse's
quantileExact returns, so a figure computed in Python matches the one an analyst queries."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(1, min(len(ordered), math.ceil(q / 100 * len(ordered)))) - 1]


def latency_line(
    name: str, values: Sequence[float], *, name_width: int = 28, width: int = 7
) -> str:
    """One report line: p50, p99 and max of `values` (milliseconds), and how many."""
    p50, p99, top = percentile(values, 50), percentile(values, 99), max(values, default=0.0)
    return (
        f"  {name:<{name_width}} p50 {p50:{width}.3f} ms   p99 {p99:{width}.3f} ms"
        f"   max {top:{width}.3f} ms   (n={len(values)})"
    )
