"""The load test's judgements on synthetic steps: the knee, the busiest process, memory
growth."""

from __future__ import annotations

from bench.knee import Step, bounded, busiest, find_knee, growth_per_minute, judge


def step(rate: float, *, ttft: float, done: float = 1.0, errors=None) -> Step:
    offered = int(rate * 10)
    return Step(
        rate=rate,
        seconds=10,
        offered=offered,
        accepted=offered,
        completed=int(offered * done),
        errors=errors or {},
        ttft_ms=[ttft] * 100,
    )


TARGETS = {"ttft_p99_ms": 500.0, "min_completion": 0.99}


def test_the_knee_is_the_first_rate_that_misses_a_target():
    steps = [step(2, ttft=80), step(4, ttft=120), step(8, ttft=900), step(16, ttft=3000)]
    knee = find_knee(steps, **TARGETS)
    assert knee.sustained is steps[1] and knee.broken is steps[2]
    assert "TTFT p99 900 ms" in knee.reason


def test_lost_throughput_and_errors_break_a_step_before_latency_does():
    assert "completed 90.0%" in judge(step(8, ttft=50, done=0.9), **TARGETS)
    assert judge(step(8, ttft=50, errors={"overloaded": 3}), **TARGETS) == "errors: overloaded: 3"
    assert judge(step(8, ttft=50), **TARGETS) == ""


def test_a_ramp_that_never_breaks_says_so():
    knee = find_knee([step(1, ttft=10), step(2, ttft=10)], **TARGETS)
    assert knee.broken is None and knee.sustained.rate == 2
    assert "raise the ramp" in knee.reason
    first = find_knee([step(1, ttft=9000)], **TARGETS)
    assert first.sustained is None and first.broken.rate == 1


def test_busiest_process():
    assert busiest({"edge": 40.0, "inference worker": 97.5, "kafka": 30.0}) == (
        "inference worker",
        97.5,
    )
    assert busiest({}) == ("", 0.0)


def test_memory_growth_ignores_warm_up_and_measures_the_tail():
    warm_then_flat = [(t, 100.0 + min(t, 60) * 0.5) for t in range(0, 600, 10)]
    assert abs(growth_per_minute(warm_then_flat)) < 1e-9
    leaking = [(t, 100.0 + t * 0.1) for t in range(0, 600, 10)]  # 6 MiB/min
    assert abs(growth_per_minute(leaking) - 6.0) < 1e-6
    assert bounded(warm_then_flat, max_mib_per_min=1.0)
    assert not bounded(leaking, max_mib_per_min=1.0)
    assert growth_per_minute([(0, 1.0)]) == 0.0
