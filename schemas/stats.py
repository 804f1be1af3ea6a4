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
