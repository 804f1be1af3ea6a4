"""The load test's judgements, pure: where the knee is (the first offered rate at which the
latency target breaks or turns stop keeping up), which process saturates first, and
whether memory grows during a soak.

The runner (`bench.load`) measures; these functions decide, so they are unit-tested on
synthetic steps instead of trusted to a noisy machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.stats import percentile


@dataclass
class Step:
    """One rate of the ramp: what was offered and what came back."""

    rate: float  # turns/s offered (open loop: arrivals do not wait for answers)
    seconds: float
    offered: int = 0
    accepted: int = 0
    completed: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # error code → turns
    ttft_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    streams_max: int = 0  # answers in flight at once, at the worst moment
    cpu: dict[str, float] = field(default_factory=dict)  # process → mean % of one core

    @property
    def throughput(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0

    @property
    def completion(self) -> float:
        return self.completed / self.offered if self.offered else 1.0


@dataclass(frozen=True, slots=True)
class Knee:
    """The last rate that met the targets, the first that broke them, and why."""

    sustained: Step | None
    broken: Step | None
    reason: str


def judge(step: Step, *, ttft_p99_ms: float, min_completion: float) -> str:
    """Why this step misses the targets ('' when it meets them)."""
    if step.errors:
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(step.errors.items()))
        return f"errors: {codes}"
    if step.completion < min_completion:
        return f"completed {step.completion:.1%} of offered turns"
    p99 = percentile(step.ttft_ms, 99)
    if p99 > ttft_p99_ms:
        return f"TTFT p99 {p99:.0f} ms > {ttft_p99_ms:.0f} ms"
    return ""


def find_knee(steps: Sequence[Step], *, ttft_p99_ms: float, min_completion: float) -> Knee:
    """Steps in increasing rate; the knee is at the first one that misses a target."""
    sustained = None
    for step in steps:
        reason = judge(step, ttft_p99_ms=ttft_p99_ms, min_completion=min_completion)
        if reason:
            return Knee(sustained, step, reason)
        sustained = step
    return Knee(sustained, None, "every rate met the targets (raise the ramp)")


def busiest(cpu: Mapping[str, float]) -> tuple[str, float]:
    """The process using the most CPU (% of one core): what saturates first."""
    if not cpu:
        return "", 0.0
    name = max(cpu, key=cpu.__getitem__)
    return name, cpu[name]


def growth_per_minute(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) over the second half of a soak, in MiB per
    minute (the first half is warm-up: caches, pools and JIT-like growth settle there)."""
    tail = samples[len(samples) // 2 :]
    if len(tail) < 2:
        return 0.0
    n = len(tail)
    mean_t = sum(t for t, _ in tail) / n
    mean_m = sum(m for _, m in tail) / n
    var = sum((t - mean_t) ** 2 for t, _ in tail)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in tail)
    return cov / var * 60


def bounded(samples: Sequence[tuple[float, float]], *, max_mib_per_min: float) -> bool:
    """No unbounded growth: the late-soak slope stays under the allowance."""
    return growth_per_minute(samples) <= max_mib_per_min
