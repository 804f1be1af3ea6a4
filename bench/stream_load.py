"""Timing concurrent token streams: throughput, TTFT and inter-token latency (stdlib only).

A run starts `concurrency` streams at once and stamps, per stream, when it was started and
when each delta arrived with how many tokens it carried. Inter-token latency is the gap
between deltas divided by the tokens the later one carries (a reader that falls behind
gets several tokens in one delta; counting them as zero gaps would flatter it). Throughput
is every output token over the wall time from the first start to the last token.

Shared by bench/gpu_check.py (which runs where only torch and transformers are installed)
and bench/engines.py; imports nothing of turnstream's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from bench.stats import percentile


@dataclass
class StreamTimes:
    started: float
    deltas: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens)

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.deltas)

    @property
    def ttft_s(self) -> float | None:
        return self.deltas[0][0] - self.started if self.deltas else None

    def itl_s(self) -> list[float]:
        gaps: list[float] = []
        for (before, _), (after, n) in zip(self.deltas, self.deltas[1:], strict=False):
            gaps += [(after - before) / n] * n if n > 0 else []
        return gaps


@dataclass
class LoadRun:
    mode: str
    concurrency: int
    streams: list[StreamTimes]
    wall_s: float
    error: str = ""

    def row(self) -> dict:
        """The run's JSON row: tokens/s, TTFT and ITL percentiles in ms."""
        ttft = [s.ttft_s * 1000 for s in self.streams if s.ttft_s is not None]
        itl = [g * 1000 for s in self.streams for g in s.itl_s()]
        tokens = sum(s.tokens for s in self.streams)
        return {
            "mode": self.mode,
            "concurrency": self.concurrency,
            "streams": len(self.streams),
            "output_tokens": tokens,
            "wall_s": round(self.wall_s, 3),
            "tokens_per_s": round(tokens / self.wall_s, 2) if self.wall_s > 0 else 0.0,
            "ttft_p50_ms": round(percentile(ttft, 50), 2),
            "ttft_p99_ms": round(percentile(ttft, 99), 2),
            "itl_p50_ms": round(percentile(itl, 50), 3),
            "itl_p99_ms": round(percentile(itl, 99), 3),
            "error": self.error,
        }


StreamFactory = Callable[[int], AsyncIterator[int]]  # stream index -> tokens per delta


async def run_load(
    mode: str, concurrency: int, start: StreamFactory, timeout_s: float | None = None
) -> LoadRun:
    """Start `concurrency` streams at once and time them; past `timeout_s` the streams
    still running are cancelled and the run keeps what arrived (its `error` says so)."""
    streams = [StreamTimes(0.0) for _ in range(concurrency)]
    clock = time.perf_counter

    async def one(index: int) -> None:
        times = streams[index]
        times.started = clock()
        async for tokens in start(index):
            times.deltas.append((clock(), tokens))

    began = clock()
    tasks = [asyncio.create_task(one(i)) for i in range(concurrency)]
    error = ""
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    if pending:
        error = f"timed out after {timeout_s:.0f} s; {len(pending)} streams cut short"
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    failures = [t.exception() for t in done if not t.cancelled() and t.exception()]
    if failures:
        error = (error + "; " if error else "") + f"{len(failures)} failed: {failures[0]!r}"
    ends = [s.deltas[-1][0] for s in streams if s.deltas]
    wall = (max(ends) if ends else clock()) - began
    return LoadRun(mode, concurrency, streams, wall, error)


RATIO_KEYS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


def ratios(rows: list[dict], baseline: str) -> list[dict]:
    """Each other mode's numbers over the baseline mode's at the same concurrency."""
    by = {(r["mode"], r["concurrency"]): r for r in rows}
    out = []
    for (mode, level), row in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = by.get((baseline, level))
        if mode == baseline or base is None:
            continue
        entry: dict = {"mode": mode, "concurrency": level}
        for key in RATIO_KEYS:
            entry[key] = round(row[key] / base[key], 3) if base[key] else None
        out.append(entry)
    return out


def table(rows: list[dict]) -> str:
    """The rows as a fixed-width table (what the benchmarks print)."""
    head = (
        f"{'mode':<28}{'conc':>5}{'tok/s':>10}{'ttft p50':>10}{'ttft p99':>10}"
        f"{'itl p50':>9}{'itl p99':>9}  note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['mode']:<28}{r['concurrency']:>5}{r['tokens_per_s']:>10.1f}"
            f"{r['ttft_p50_ms']:>10.1f}{r['ttft_p99_ms']:>10.1f}{r['itl_p50_ms']:>9.2f}"
            f"{r['itl_p99_ms']:>9.2f}  {r.get('error', '')}"
        )
    return "\n".join(lines)
