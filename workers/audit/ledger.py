"""What the audit has done: counts, lag percentiles, and whether a turn is too late to audit.

The backlog is the `traces` topic itself (the audit commits a trace's offset only once its
verdict is on Kafka), so nothing waits in memory and a restart resumes where the audit
stopped. When the guard falls behind, `max_lag_ms` decides: 0 audits every turn however late
(the backlog waits in Kafka); above 0 a turn that finished longer ago than that is recorded
as skipped (`audit_skipped`, counted) so the audit stays close to live traffic.

Lag is now minus the turn's completion time, recorded for every audited turn; p50/p99 are
over the last `lag_window` of them. Pure: every method takes the time, nothing sleeps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from schemas.stats import percentile as nearest_rank


@dataclass(frozen=True, slots=True)
class AuditJob:
    turn_id: str
    tenant: str
    user_id: str
    user_text: str
    assistant_text: str
    completed_at_ms: int
    conversation_id: str = ""


@dataclass(frozen=True, slots=True)
class LedgerStats:
    audited: int
    skipped: int
    errors: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None


def percentile(values: list[float], q: float) -> float | None:
    """The shared nearest-rank percentile (`schemas.stats`), None for no values (an audit
    that judged nothing yet has no lag, not a lag of 0)."""
    return nearest_rank(values, q) if values else None


class AuditLedger:
    def __init__(self, max_lag_ms: float = 0.0, lag_window: int = 1000) -> None:
        if max_lag_ms < 0:
            raise ValueError("max_lag_ms must be >= 0 (0: audit every turn)")
        self.max_lag_ms = max_lag_ms
        self._lags: deque[float] = deque(maxlen=lag_window)
        self.audited = 0
        self.skipped = 0
        self.errors = 0

    @staticmethod
    def lag(job: AuditJob, now_ms: float) -> float:
        return float(max(0.0, now_ms - job.completed_at_ms))  # clock skew never goes negative

    def too_late(self, job: AuditJob, now_ms: float) -> bool:
        """Whether to skip `job` (counted as skipped when it is)."""
        late = self.max_lag_ms > 0 and self.lag(job, now_ms) > self.max_lag_ms
        self.skipped += late
        return late

    def finish(self, job: AuditJob, now_ms: float, error: bool = False) -> float:
        """Record a job as audited (or failed) and return its lag in ms."""
        lag = self.lag(job, now_ms)
        self._lags.append(lag)
        self.audited += 1
        self.errors += error
        return lag

    def stats(self) -> LedgerStats:
        lags = list(self._lags)
        return LedgerStats(
            audited=self.audited,
            skipped=self.skipped,
            errors=self.errors,
            lag_p50_ms=percentile(lags, 50),
            lag_p99_ms=percentile(lags, 99),
        )
