"""Consumer lag export: records behind the one taken, and a broken watermark never raises."""

from __future__ import annotations

from runtime.lag import LagGauge, records_behind
from runtime.prometheus import REGISTRY


def test_records_behind_counts_what_follows_the_taken_record():
    assert records_behind(highwater=10, offset=9) == 0  # the last record: nothing behind
    assert records_behind(highwater=10, offset=4) == 5
    assert records_behind(highwater=3, offset=7) == 0  # a stale watermark is never negative


def lag_of(group: str, topic: str, partition: int) -> float | None:
    labels = {"group": group, "topic": topic, "partition": str(partition)}
    return REGISTRY.get_sample_value("turnstream_consumer_lag_records", labels)


def test_the_gauge_follows_each_partition():
    watermarks = {("t", 0): 100, ("t", 1): 5}
    gauge = LagGauge("unit-lag", watermarks.get)
    gauge.observe("t", 0, 40)
    gauge.observe("t", 1, 4)
    gauge.observe("t", 2, 1)  # no watermark fetched yet: nothing exported
    assert lag_of("unit-lag", "t", 0) == 59
    assert lag_of("unit-lag", "t", 1) == 0
    assert lag_of("unit-lag", "t", 2) is None


def test_a_failing_watermark_is_logged_once_and_never_raises(caplog):
    def broken(tp):
        raise RuntimeError("no fetch yet")

    gauge = LagGauge("unit-broken", broken)
    gauge.observe("t", 0, 1)
    gauge.observe("t", 0, 2)
    assert lag_of("unit-broken", "t", 0) is None
    assert sum("not exported" in r.message for r in caplog.records) == 1
