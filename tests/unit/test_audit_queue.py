"""The bounded audit queue: drop policies, counters, lag percentiles."""

from __future__ import annotations

import pytest

from workers.audit.queue import AuditJob, AuditQueue, DropPolicy, percentile


def job(n: int, at_ms: int = 0) -> AuditJob:
    return AuditJob(f"t{n}", "acme", "u1", "hi", "hello", at_ms)


def test_fifo_within_capacity() -> None:
    q = AuditQueue(3)
    for n in range(3):
        assert q.offer(job(n)) is None
    assert [q.take().turn_id for _ in range(3)] == ["t0", "t1", "t2"]  # type: ignore[union-attr]
    assert q.take() is None


def test_drop_oldest_keeps_newest() -> None:
    q = AuditQueue(2, "drop_oldest")
    q.offer(job(0))
    q.offer(job(1))
    dropped = q.offer(job(2))
    assert dropped is not None and dropped.turn_id == "t0"
    assert [q.take().turn_id, q.take().turn_id] == ["t1", "t2"]  # type: ignore[union-attr]
    assert (q.enqueued, q.dropped) == (3, 1)


def test_skip_new_keeps_backlog() -> None:
    q = AuditQueue(2, DropPolicy.SKIP_NEW)
    q.offer(job(0))
    q.offer(job(1))
    skipped = q.offer(job(2))
    assert skipped is not None and skipped.turn_id == "t2"
    assert [q.take().turn_id, q.take().turn_id] == ["t0", "t1"]  # type: ignore[union-attr]
    assert (q.enqueued, q.dropped) == (2, 1)


def test_bad_config() -> None:
    with pytest.raises(ValueError):
        AuditQueue(0)
    with pytest.raises(ValueError):
        AuditQueue(1, "drop_random")


def test_counters_and_lag() -> None:
    q = AuditQueue(10, lag_window=100)
    for n in range(10):
        q.offer(job(n, at_ms=1000))
    assert q.stats(now_ms=1500).oldest_pending_lag_ms == 500
    for n in range(10):
        taken = q.take()
        assert taken is not None
        lag = q.finish(taken, now_ms=1000 + (n + 1) * 100, error=(n == 3))
        assert lag == (n + 1) * 100
    s = q.stats(now_ms=5000)
    assert (s.depth, s.enqueued, s.dropped, s.done, s.errors) == (0, 10, 0, 10, 1)
    assert s.lag_p50_ms == 500
    assert s.lag_p99_ms == 1000
    assert s.oldest_pending_lag_ms is None


def test_lag_window_forgets_old_jobs() -> None:
    q = AuditQueue(5, lag_window=2)
    for at, now in [(0, 10_000), (0, 10), (0, 20)]:
        q.finish(job(0, at), now)
    assert q.stats(0).lag_p99_ms == 20
    assert q.finish(job(0, at_ms=100), now_ms=50) == 0  # clock skew never goes negative


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 50) == 50
    assert percentile([float(v) for v in range(1, 101)], 99) == 99
