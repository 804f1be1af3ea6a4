"""What a turn costs the pipeline, from two readings of the stack around a run (pure).

A reading holds every process's CPU seconds, every topic's record count and bytes and
Redis's command counts at one moment; the difference of two readings divided by the turns
completed between them is the cost per turn. Kept free of I/O so the arithmetic is tested
on its own (`tests/unit/bench/test_cost_books.py`) and the benchmark (`bench.cost`) only reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.stats import percentile


@dataclass(frozen=True, slots=True)
class Reading:
    """The stack's counters at one moment (monotonic `at` in seconds)."""

    at: float
    cpu_s: Mapping[str, float]  # process name → user + system seconds (with its children)
    records: Mapping[str, int]  # topic (namespace stripped) → records in all partitions
    redis_calls: Mapping[str, int]  # command → calls since Redis started


@dataclass(frozen=True, slots=True)
class Window:
    """One measured run: the readings around it, the turns it completed and the bytes each
    topic received meanwhile (bytes are counted by reading the records back)."""

    before: Reading
    after: Reading
    turns: int
    topic_bytes: Mapping[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.after.at - self.before.at

    def cpu_ms_per_turn(self) -> dict[str, float]:
        """Each process's CPU per completed turn, in ms (0 turns: NaN, not a division error)."""
        return {
            name: _per(
                1000 * (self.after.cpu_s[name] - self.before.cpu_s.get(name, 0.0)), self.turns
            )
            for name in self.after.cpu_s
        }

    def cpu_ms_per_turn_above(self, idle_percent: Mapping[str, float]) -> dict[str, float]:
        """Each process's CPU per turn beyond what it burns idle over the same time (the
        marginal cost; at low load the idle share dominates the gross figure)."""
        gross = self.cpu_ms_per_turn()
        return {
            name: ms - _per(10 * idle_percent.get(name, 0.0) * self.seconds, self.turns)
            for name, ms in gross.items()
        }

    def cpu_percent(self) -> dict[str, float]:
        """Each process's mean CPU over the window, in % of one core (the idle figure)."""
        span = max(self.seconds, 1e-9)
        return {
            name: 100 * (self.after.cpu_s[name] - self.before.cpu_s.get(name, 0.0)) / span
            for name in self.after.cpu_s
        }

    def records_per_turn(self) -> dict[str, float]:
        return {
            topic: _per(n - self.before.records.get(topic, 0), self.turns)
            for topic, n in self.after.records.items()
            if n - self.before.records.get(topic, 0) > 0
        }

    def bytes_per_turn(self) -> dict[str, float]:
        return {topic: _per(b, self.turns) for topic, b in self.topic_bytes.items() if b}

    def redis_calls_per_turn(self) -> dict[str, float]:
        return {
            cmd: _per(n - self.before.redis_calls.get(cmd, 0), self.turns)
            for cmd, n in self.after.redis_calls.items()
            if n - self.before.redis_calls.get(cmd, 0) > 0
        }


@dataclass(frozen=True, slots=True)
class Spread:
    """The median of repeated measurements with their lowest and highest."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        clean = [v for v in values if not math.isnan(v)]
        if not clean:
            return cls(math.nan, math.nan, math.nan)
        return cls(percentile(clean, 50), min(clean), max(clean))

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "low": self.low, "high": self.high}


def spread_by_key(samples: Sequence[Mapping[str, float]]) -> dict[str, Spread]:
    """Per key, the spread over repeated windows (a key missing from a window counts 0)."""
    keys = sorted({k for s in samples for k in s})
    return {k: Spread.of([s.get(k, 0.0) for s in samples]) for k in keys}


def mean_cpu_percent(windows: Sequence[Window]) -> dict[str, float]:
    """Each process's CPU over several windows (the idle ones of several rounds), in % of one
    core: all their CPU over all their time, so a longer window weighs more."""
    seconds = sum(w.seconds for w in windows)
    if seconds <= 0:
        return {}
    used: dict[str, float] = {}
    for w in windows:
        for name, after in w.after.cpu_s.items():
            used[name] = used.get(name, 0.0) + after - w.before.cpu_s.get(name, 0.0)
    return {name: 100 * cpu / seconds for name, cpu in used.items()}


def total(sample: Mapping[str, float]) -> float:
    return sum(v for v in sample.values() if not math.isnan(v))


def parse_commandstats(info: Mapping[str, object]) -> dict[str, int]:
    """`INFO commandstats` as redis-py parses it ({"cmdstat_get": {"calls": 3, ...}}) →
    {"get": 3}."""
    calls: dict[str, int] = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and isinstance(value, Mapping):
            calls[key.removeprefix("cmdstat_")] = int(value.get("calls", 0))
    return calls


def strip_namespace(topic: str, namespace: str) -> str:
    """A broker topic's name without the run's namespace (faust's changelogs included)."""
    return topic.removeprefix(namespace + ".") if namespace else topic


def _per(amount: float, turns: int) -> float:
    return amount / turns if turns > 0 else math.nan
