"""The bounded in-memory queue in front of the guard model, with a drop policy and lag.

A real guard model takes seconds a turn on CPU, slower than turns complete at peak, so the
audit keeps a fixed number of pending jobs and, when full, either drops the oldest pending
job (`drop_oldest`: the audit stays close to live traffic) or refuses the new one
(`skip_new`: the backlog is audited in order). Either way the drop is counted, never silent.
A job that the guard failed on is finished with `error=True`: counted, its lag recorded, not
retried, so a crashing input cannot stall the queue.

Lag is now minus the turn's completion time, recorded when a job finishes; p50/p99 are over
the last `lag_window` finished jobs. Pure: every method takes the time, nothing sleeps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from schemas.stats import percentile as nearest_rank


class DropPolicy(StrEnum):
    DROP_OLDEST = "drop_oldest"
    SKIP_NEW = "skip_new"


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
class QueueStats:
    depth: int
    enqueued: int
    dropped: int
    done: int
    errors: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    oldest_pending_lag_ms: float | None


def percentile(values: list[float], q: float) -> float | None:
    """The shared nearest-rank percentile (`schemas.stats`), None for no values (a queue
    that audited nothing yet has no lag, not a lag of 0)."""
    return nearest_rank(values, q) if values else None


class AuditQueue:
    def __init__(
        self,
        capacity: int,
        policy: DropPolicy | str = DropPolicy.DROP_OLDEST,
        lag_window: int = 1000,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.policy = DropPolicy(policy)
        self._pending: deque[AuditJob] = deque()
        self._lags: deque[float] = deque(maxlen=lag_window)
        self.enqueued = 0
        self.dropped = 0
        self.done = 0
        self.errors = 0

    def __len__(self) -> int:
        return len(self._pending)

    def offer(self, job: AuditJob) -> AuditJob | None:
        """Queue `job`; returns the job dropped to make room (or `job` itself when skipped)."""
        if len(self._pending) < self.capacity:
            self._pending.append(job)
            self.enqueued += 1
            return None
        self.dropped += 1
        if self.policy is DropPolicy.SKIP_NEW:
            return job
        dropped = self._pending.popleft()
        self._pending.append(job)
        self.enqueued += 1
        return dropped

    def take(self) -> AuditJob | None:
        """The oldest pending job, or None when empty."""
        return self._pending.popleft() if self._pending else None

    def finish(self, job: AuditJob, now_ms: int, error: bool = False) -> float:
        """Record a job as audited (or failed) and return its lag in ms."""
        lag = float(max(0, now_ms - job.completed_at_ms))
        self._lags.append(lag)
        self.done += 1
        if error:
            self.errors += 1
        return lag

    def stats(self, now_ms: int) -> QueueStats:
        lags = list(self._lags)
        oldest = float(max(0, now_ms - self._pending[0].completed_at_ms)) if self._pending else None
        return QueueStats(
            depth=len(self._pending),
            enqueued=self.enqueued,
            dropped=self.dropped,
            done=self.done,
            errors=self.errors,
            lag_p50_ms=percentile(lags, 50),
            lag_p99_ms=percentile(lags, 99),
            oldest_pending_lag_ms=oldest,
        )
