"""The epoch-millisecond clock that event timestamps use, shared by all roles."""

from __future__ import annotations

import time


def now_ms() -> float:
    """Wall clock in epoch milliseconds (comparable across processes on one host)."""
    return time.time() * 1000.0
