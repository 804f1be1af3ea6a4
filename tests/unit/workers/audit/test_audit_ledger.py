"""The audit ledger: counters, lag percentiles, the max-lag skip."""

from __future__ import annotations

import pytest

from workers.audit.ledger import AuditJob, AuditLedger, percentile


def job(n: int, at_ms: int = 0) -> AuditJob:
    return AuditJob(f"t{n}", "acme", "u1", "hi", "hello", at_ms)


def test_without_a_max_lag_every_turn_is_audited_however_late() -> None:
    ledger = AuditLedger()
    assert not ledger.too_late(job(0, at_ms=0), now_ms=10**9)
    assert ledger.skipped == 0


def test_a_turn_older_than_the_max_lag_is_skipped_and_counted() -> None:
    ledger = AuditLedger(max_lag_ms=1000)
    assert not ledger.too_late(job(0, at_ms=0), now_ms=1000)
    assert ledger.too_late(job(1, at_ms=0), now_ms=1001)
    assert ledger.stats().skipped == 1


def test_bad_config() -> None:
    with pytest.raises(ValueError):
        AuditLedger(max_lag_ms=-1)


def test_counters_and_lag() -> None:
    ledger = AuditLedger(lag_window=100)
    for n in range(10):
        lag = ledger.finish(job(n, at_ms=1000), now_ms=1000 + (n + 1) * 100, error=(n == 3))
        assert lag == (n + 1) * 100
    s = ledger.stats()
    assert (s.audited, s.skipped, s.errors) == (10, 0, 1)
    assert s.lag_p50_ms == 500
    assert s.lag_p99_ms == 1000


def test_lag_window_forgets_old_jobs() -> None:
    ledger = AuditLedger(lag_window=2)
    for at, now in [(0, 10_000), (0, 10), (0, 20)]:
        ledger.finish(job(0, at), now)
    assert ledger.stats().lag_p99_ms == 20
    assert ledger.finish(job(0, at_ms=100), now_ms=50) == 0  # clock skew never goes negative


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 50) == 50
    assert percentile([float(v) for v in range(1, 101)], 99) == 99
