import math

from bench.stats import compare, percentile


def test_percentile_interpolates_and_handles_edges():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile([3, 1, 2], 100) == 3
    assert math.isnan(percentile([], 50))


def test_comparison_reports_added_latency_and_ratio():
    [p50, p99] = compare("ttft", [10, 10, 10, 20], [12, 12, 12, 30])
    assert (p50.added_ms, p50.ratio) == (2.0, 1.2)
    assert p99.added_ms > 0 and p99.q == 99
