"""Times as the producers' command lines take them (`--since 2h`, an ISO time, epoch ms)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from producers.errors import ProducerError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


class TimeError(ProducerError, ValueError):
    code = "bad_time"


def parse_time_ms(text: str, now_ms: float) -> float:
    """`2h` (before now), an ISO 8601 time, or epoch milliseconds."""
    match = _DURATION.match(text)
    if match:
        seconds = float(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
        return now_ms - seconds * 1000
    if text.isdigit():
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TimeError(f"not a time: {text!r} (2h, 2026-11-30T10:00, or epoch ms)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() * 1000
