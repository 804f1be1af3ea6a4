"""The benchmark's pure parts: stamps in token texts, windows, continuity, delivery statistics,
phases."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.connections.common import STAMP
from bench.stats import summary


def token_text(index: int, stamp_ms: float) -> str:
    """A pump token: its index in the answer and the wall clock (ms) when it was published."""
    return f" {index}@{stamp_ms:.1f}"


def parse_stamps(text: str) -> list[tuple[int, float]]:
    """(index, stamp ms) of every token in a delta's text (joined deltas hold several)."""
    return [(int(m[1]), float(m[2])) for m in STAMP.finditer(text)]


@dataclass(slots=True)
class Continuity:
    """One answer's token indices as they arrive: they must count 0, 1, 2, ... ."""

    next_index: int = 0
    gaps: int = 0  # tokens skipped
    duplicates: int = 0  # tokens seen again

    def feed(self, index: int) -> None:
        if index == self.next_index:
            self.next_index += 1
        elif index > self.next_index:
            self.gaps += index - self.next_index
            self.next_index = index + 1
        else:
            self.duplicates += 1

    @property
    def clean(self) -> bool:
        return self.gaps == 0 and self.duplicates == 0


@dataclass(frozen=True, slots=True)
class Window:
    """The measured stretch, in wall-clock ms (receive times)."""

    start_ms: float
    end_ms: float

    def __contains__(self, at_ms: float) -> bool:
        return self.start_ms <= at_ms < self.end_ms

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000


@dataclass
class Recorder:
    """Tokens and frames one process received; delays of those received in the window."""

    window: Window | None = None
    tokens: int = 0  # in the window
    frames: int = 0  # in the window
    total_tokens: int = 0
    total_frames: int = 0
    delays: array = field(default_factory=lambda: array("d"))  # ms, tokens in the window

    def delta(self, now_ms: float, text: str, check: Continuity) -> int:
        """A delta frame received at `now_ms`; returns how many tokens it carried."""
        stamps = parse_stamps(text)
        self.total_frames += 1
        self.total_tokens += len(stamps)
        for index, _ in stamps:
            check.feed(index)
        window = self.window
        if window is not None and now_ms in window:
            self.frames += 1
            self.tokens += len(stamps)
            self.delays.extend(now_ms - stamp for _, stamp in stamps)
        return len(stamps)

    def report(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "frames": self.frames,
            "total_tokens": self.total_tokens,
            "total_frames": self.total_frames,
            "delays": self.delays.tobytes(),
        }


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several processes' `Recorder.report()`s as one (delays as a list of ms)."""
    delays: list[float] = []
    for r in reports:
        part = array("d")
        part.frombytes(r["delays"])
        delays.extend(part)
    keys = ("tokens", "frames", "total_tokens", "total_frames")
    return {**{k: sum(r[k] for r in reports) for k in keys}, "delays": delays}


def ratio(value: float, base: float) -> float:
    """value / base; NaN when either is unknown or the base is 0."""
    if base == 0 or math.isnan(base) or math.isnan(value):
        return math.nan
    return value / base


def delivery_stats(
    received: dict[str, Any], seconds: float, direct_delays: Sequence[float]
) -> dict[str, Any]:
    """Throughput, coalescing and delay of one edge run, its added delay over the direct
    baseline's (same percentile)."""
    delay = summary(received["delays"])
    direct = summary(direct_delays)
    return {
        "tokens_per_s": received["tokens"] / seconds if seconds else math.nan,
        "frames_per_s": received["frames"] / seconds if seconds else math.nan,
        "tokens_per_frame": ratio(received["tokens"], received["frames"]),
        "delay_ms": delay,
        "direct_delay_ms": direct,
        "added_p50_ms": delay["p50"] - direct["p50"],
        "added_p99_ms": delay["p99"] - direct["p99"],
    }


def versus(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """A run against the baseline run (the smallest N): > 1 means more (delay, cost) or more
    throughput."""
    return {
        "connections": ratio(row["connections"], base["connections"]),
        "tokens_per_s": ratio(row["tokens_per_s"], base["tokens_per_s"]),
        "delay_p99": ratio(row["delay_ms"]["p99"], base["delay_ms"]["p99"]),
        "added_p99": ratio(row["added_p99_ms"], base["added_p99_ms"]),
        "rss_per_connection": ratio(row["rss_kb_per_conn"], base["rss_kb_per_conn"]),
        "edge_cpu_us_per_token": ratio(row["edge_cpu_us_per_token"], base["edge_cpu_us_per_token"]),
        "resume_p99": ratio(row["resume_ms"]["p99"], base["resume_ms"]["p99"]),
    }


def stream_rate(streams: int, per_stream: float, max_offered: float) -> float:
    """Tokens/s each stream gets: `per_stream`, lowered so that all of them together offer
    at most `max_offered` (0: no cap)."""
    if max_offered <= 0 or streams <= 0:
        return per_stream
    return min(per_stream, max_offered / streams)


def phases_for(rate: float, steps_per_s: float) -> int:
    """How many groups the pump's streams take turns in, so that it makes `steps_per_s`
    decode steps a second whatever the per-stream rate (each step as big at 1k streams and
    5 tokens/s as at 10k and 0.5/s: the same burstiness)."""
    return max(1, round(steps_per_s / rate))


def split(total: int, parts: int) -> list[int]:
    """`total` as `parts` near-equal shares (the first ones get the remainder)."""
    share, extra = divmod(total, parts)
    return [share + (i < extra) for i in range(parts)]


def quantiles(values: Sequence[float], points: int = 200) -> list[float]:
    """The sample's quantiles at `points` evenly spaced ranks (a CDF small enough for JSON)."""
    if not values:
        return []
    ordered = sorted(values)
    last = len(ordered) - 1
    return [ordered[round(last * i / (points - 1))] for i in range(points)]
