"""The cost benchmark's arithmetic: readings around a window → cost per turn."""

from __future__ import annotations

import math

import pytest

from bench.cost_books import (
    Reading,
    Spread,
    Window,
    mean_cpu_percent,
    parse_commandstats,
    spread_by_key,
    strip_namespace,
    total,
)


def reading(at: float, cpu: dict, records: dict, calls: dict) -> Reading:
    return Reading(at=at, cpu_s=cpu, records=records, redis_calls=calls)


def test_cost_per_turn_is_the_difference_over_the_turns() -> None:
    before = reading(10.0, {"edge": 1.0, "kafka": 2.0}, {"turns.submitted": 5}, {"xadd": 7})
    after = reading(
        12.0,
        {"edge": 1.2, "kafka": 2.5},
        {"turns.submitted": 15, "traces": 10},
        {"xadd": 27, "get": 3},
    )
    w = Window(before, after, turns=10, topic_bytes={"traces": 4000, "turns.submitted": 0})
    assert w.cpu_ms_per_turn() == pytest.approx({"edge": 20.0, "kafka": 50.0})
    assert w.records_per_turn() == {"turns.submitted": 1.0, "traces": 1.0}
    assert w.bytes_per_turn() == {"traces": 400.0}
    assert w.redis_calls_per_turn() == {"xadd": 2.0, "get": 0.3}
    assert w.cpu_percent() == pytest.approx({"edge": 10.0, "kafka": 25.0})


def test_a_process_or_topic_new_in_the_window_counts_from_zero() -> None:
    before = reading(0.0, {}, {}, {})
    after = reading(1.0, {"sink": 0.4}, {"traces-pending-changelog": 8}, {})
    w = Window(before, after, turns=4)
    assert w.cpu_ms_per_turn() == pytest.approx({"sink": 100.0})
    assert w.records_per_turn() == {"traces-pending-changelog": 2.0}


def test_above_idle_takes_off_what_the_process_burns_anyway() -> None:
    before = reading(0.0, {"kafka": 0.0}, {}, {})
    after = reading(2.0, {"kafka": 0.5}, {}, {})
    w = Window(before, after, turns=10)
    # 10% of a core idle over 2 s is 200 ms: 300 ms of the 500 are the turns' own
    assert w.cpu_ms_per_turn_above({"kafka": 10.0}) == pytest.approx({"kafka": 30.0})


def test_no_turns_gives_nan_not_an_error() -> None:
    w = Window(reading(0, {"edge": 0.0}, {}, {}), reading(1, {"edge": 0.1}, {"t": 1}, {}), 0)
    assert math.isnan(w.cpu_ms_per_turn()["edge"])
    assert math.isnan(w.records_per_turn()["t"])
    assert total(w.cpu_ms_per_turn()) == 0


def test_spread_is_median_low_high_and_missing_keys_count_zero() -> None:
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0)
    spreads = spread_by_key([{"a": 1.0, "b": 4.0}, {"a": 3.0}])
    assert spreads["a"] == Spread(2.0, 1.0, 3.0)
    assert spreads["b"] == Spread(2.0, 0.0, 4.0)
    assert math.isnan(Spread.of([math.nan]).median)


def test_commandstats_and_namespaces() -> None:
    info = {
        "cmdstat_xadd": {"calls": 12, "usec": 40},
        "cmdstat_script|exists": {"calls": 2},
        "errorstat_ERR": {"count": 1},
    }
    assert parse_commandstats(info) == {"xadd": 12, "script|exists": 2}
    assert strip_namespace("cost-1a.traces", "cost-1a") == "traces"
    assert strip_namespace("cost-1a.traces-pending-changelog", "cost-1a") == (
        "traces-pending-changelog"
    )
    assert strip_namespace("traces", "") == "traces"


def test_idle_over_rounds_is_all_their_cpu_over_all_their_time() -> None:
    short = Window(reading(0, {"kafka": 0.0}, {}, {}), reading(10, {"kafka": 1.0}, {}, {}), 0)
    long = Window(
        reading(100, {"kafka": 5.0}, {}, {}), reading(130, {"kafka": 5.6, "sink": 0.3}, {}, {}), 0
    )
    mean = mean_cpu_percent([short, long])
    assert mean["kafka"] == pytest.approx(100 * 1.6 / 40)  # not the mean of 10% and 2%
    assert mean["sink"] == pytest.approx(100 * 0.3 / 40)
    assert mean_cpu_percent([]) == {}


def test_rounds_of_one_side_pool_their_windows() -> None:
    from bench.cost import SideResult, merge

    def w(turns: int) -> Window:
        return Window(reading(0, {}, {}, {}), reading(1, {}, {}, {}), turns)

    a = SideResult("this", idle=[w(0)], levels={16: [w(1)]}, ttft_ms={16: [5.0]}, errors={16: 1})
    b = SideResult(
        "this",
        idle=[w(0)],
        levels={16: [w(2)], 64: [w(3)]},
        ttft_ms={16: [6.0], 64: [7.0]},
        errors={16: 2, 64: 0},
    )
    m = merge(a, b)
    assert [x.turns for x in m.levels[16]] == [1, 2] and [x.turns for x in m.levels[64]] == [3]
    assert list(m.levels) == [16, 64] and len(m.idle) == 2
    assert m.ttft_ms == {16: [5.0, 6.0], 64: [7.0]} and m.errors == {16: 3, 64: 0}
