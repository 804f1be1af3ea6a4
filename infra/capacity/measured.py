"""Per-GPU throughput and latency from our own measurements instead of assumptions.

Two sources, both turned into `PoolMeasurement`s that `apply` writes over `Hardware`:

(a) A benchmark results file. The documented format, one entry per pool (only
    `tokens_per_s_per_gpu` is required):

        {"chat": {"tokens_per_s_per_gpu": 2400,          # output tokens/s per GPU at capacity
                  "ttft_p99_ms": 210,
                  "prefill_tokens_per_s_per_gpu": 18000, # optional, see below
                  "user_tokens_per_s": 72,               # optional: one stream's speed
                  "max_seqs_per_gpu": 64},               # optional: sequences a GPU holds
         "reasoning": {"tokens_per_s_per_gpu": 900, "ttft_p99_ms": 280}}

    Without `prefill_tokens_per_s_per_gpu` the output rate is taken to include the prompts'
    prefill (it was measured on a real mix), so prompts cost nothing extra. Our
    `bench.pipeline_latency` JSON (`bench/results/pipeline-latency-*.json`) is read too: the
    concurrency with the most turns/s gives tokens/s = turns/s × max_tokens (an upper bound:
    answers may stop earlier), its TTFT p99 and one stream's speed (1000 ÷ ITL p50); it names
    no pool, so it applies to the pools asked for. Those runs were on this machine's CPU.

(b) ClickHouse, over the last N hours. `worker_metrics` (the engine's counters every 500 ms)
    gives each worker's generation rate while it was saturated (requests waiting in the
    engine: the rate is then its capacity) or, failing that, while it was busy (a lower
    bound: the planner then over-provisions); `traces` gives TTFT p99, one stream's speed
    (completion tokens ÷ decode time, i.e. e2e − TTFT) and, when a pool published no
    metrics, completion tokens ÷ the window per worker (a lower bound too). The SQL lives
    in `traces_sql`/`metrics_sql`, the arithmetic in `pool_measurements` (pure, tested).
"""

# ruff: noqa: RUF002, RUF003  (× ÷ – are the arithmetic this module shows)
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from infra.capacity.model import Hardware, PoolHardware
from infra.errors import InfraError

DEFAULT_DATABASE = "turnstream"  # runtime.clickhouse.client's; not imported (no driver needed)


class MeasurementError(InfraError, ValueError):
    """A results file or a set of rows the planner cannot read."""


@dataclass(frozen=True)
class PoolMeasurement:
    pool: str
    tokens_per_s_per_gpu: float  # output tokens/s per GPU
    prefill_tokens_per_s_per_gpu: float | None = None  # None: included in the output rate
    ttft_p99_ms: float | None = None
    user_tokens_per_s: float | None = None
    max_seqs_per_gpu: float | None = None
    saturated: bool = True  # False: seen below capacity, a lower bound
    prompt_tokens_per_output_token: float | None = None  # the mix it was measured on
    source: str = ""


# --- (a) benchmark files -----------------------------------------------------------------


def _positive(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise MeasurementError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def parse_bench(
    data: Any, pools: Sequence[str] = ("chat", "reasoning"), source: str = "bench"
) -> dict[str, PoolMeasurement]:
    """Measurements from a results document (either format in the module docstring)."""
    if isinstance(data, dict) and "turns_per_s" in data and "rows" in data:
        one = _from_pipeline_latency(data, source)
        return {pool: replace(one, pool=pool) for pool in pools}
    if not isinstance(data, dict) or not data:
        raise MeasurementError(f"{source}: expected an object of pools")
    if not all(isinstance(v, dict) and "tokens_per_s_per_gpu" in v for v in data.values()):
        raise MeasurementError(
            f"{source}: not a results file the planner reads: expected "
            '{"<pool>": {"tokens_per_s_per_gpu": ...}} or a bench.pipeline_latency result'
        )
    out = {}
    for pool, entry in data.items():
        where = f"{source}: {pool}"
        rate = _positive(entry, "tokens_per_s_per_gpu", where)
        if rate is None:
            raise MeasurementError(f"{where}: tokens_per_s_per_gpu is required")
        out[pool] = PoolMeasurement(
            pool=pool,
            tokens_per_s_per_gpu=rate,
            prefill_tokens_per_s_per_gpu=_positive(entry, "prefill_tokens_per_s_per_gpu", where),
            ttft_p99_ms=_positive(entry, "ttft_p99_ms", where),
            user_tokens_per_s=_positive(entry, "user_tokens_per_s", where),
            max_seqs_per_gpu=_positive(entry, "max_seqs_per_gpu", where),
            source=source,
        )
    return out


def _from_pipeline_latency(data: Mapping[str, Any], source: str) -> PoolMeasurement:
    turns = {int(k): float(v) for k, v in data["turns_per_s"].items() if v}
    max_tokens = data.get("max_tokens")
    if not turns or not max_tokens:
        raise MeasurementError(f"{source}: no turns/s or max_tokens to derive tokens/s from")
    streams = max(turns, key=turns.__getitem__)

    def metric(name: str, q: int) -> float | None:
        for row in data["rows"]:
            if row["streams"] == streams and row["metric"] == name and row["q"] == q:
                return float(row["pipeline_ms"])
        return None

    itl = metric("itl", 50)
    return PoolMeasurement(
        pool="",
        tokens_per_s_per_gpu=turns[streams] * float(max_tokens),
        ttft_p99_ms=metric("ttft", 99),
        user_tokens_per_s=1000 / itl if itl else None,
        max_seqs_per_gpu=float(streams),
        source=f"{source} ({data.get('engine', '?')} engine, {streams} streams)",
    )


def load_bench(path: Path, pools: Sequence[str] = ("chat", "reasoning")) -> dict:
    """Read a results file; errors name the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise MeasurementError(f"{path}: {exc}") from exc
    return parse_bench(data, pools, source=Path(path).name)


# --- (b) ClickHouse ------------------------------------------------------------------------

TRACES_COLUMNS = (
    "pool",
    "turns",
    "workers",
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "decode_s",
    "ttft_p99_ms",
    "first_ms",
    "last_ms",
)
METRICS_COLUMNS = (
    "pool",
    "worker_id",
    "busy_s",
    "busy_generated",
    "saturated_s",
    "saturated_generated",
    "saturated_prefilled",
    "max_running",
)


def traces_sql(hours: float, db: str = DEFAULT_DATABASE) -> str:
    """Per pool over the window: tokens, decode time (e2e − TTFT), TTFT p99, first/last."""
    return (
        "SELECT pool, count() AS turns, uniqExact(worker_id) AS workers, "
        "sum(prompt_tokens), sum(cached_prompt_tokens), sum(completion_tokens), "
        "sum(greatest(e2e_ms - ifNull(ttft_ms, e2e_ms), 0)) / 1000 AS decode_s, "
        "quantile(0.99)(ttft_ms) AS ttft_p99_ms, "
        "toUnixTimestamp64Milli(min(submitted_at)) AS first_ms, "
        "toUnixTimestamp64Milli(max(completed_at)) AS last_ms "
        f"FROM {db}.traces FINAL "
        f"WHERE submitted_at > now() - INTERVAL {int(hours)} HOUR "
        "AND status = 'completed' AND completion_tokens > 0 "
        "GROUP BY pool ORDER BY pool"
    )


def metrics_sql(hours: float, db: str = DEFAULT_DATABASE) -> str:
    """Per worker over the window: generation while busy and while saturated (requests
    waiting in the engine at the sample), and the largest batch seen."""
    return (
        "SELECT pool, worker_id, "
        "sumIf(interval_ms, running > 0) / 1000 AS busy_s, "
        "sumIf(generation_tokens, running > 0) AS busy_generated, "
        "sumIf(interval_ms, waiting > 0) / 1000 AS saturated_s, "
        "sumIf(generation_tokens, waiting > 0) AS saturated_generated, "
        "sumIf(prompt_tokens, waiting > 0) AS saturated_prefilled, "
        "max(running) AS max_running "
        f"FROM {db}.worker_metrics "
        f"WHERE at > now() - INTERVAL {int(hours)} HOUR "
        "GROUP BY pool, worker_id ORDER BY pool, worker_id"
    )


def _rows(rows: Iterable[Sequence[Any]], columns: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if len(row) != len(columns):
            raise MeasurementError(f"expected {len(columns)} columns, got {len(row)}")
        out.append(dict(zip(columns, row, strict=True)))
    return out


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two trace rows of one pool (with and without its name): sums, the wider window, and
    the larger TTFT p99 (quantiles do not add; the larger is the cautious one). A worker in
    both rows counts twice, which only lowers a traces-only lower bound."""
    summed = ("turns", "workers", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")
    out = {k: a[k] + b[k] for k in (*summed, "decode_s")}
    p99 = [x for x in (a["ttft_p99_ms"], b["ttft_p99_ms"]) if x is not None]
    return {
        **out,
        "pool": a["pool"] or b["pool"],
        "ttft_p99_ms": max(p99) if p99 else None,
        "first_ms": min(a["first_ms"], b["first_ms"]),
        "last_ms": max(a["last_ms"], b["last_ms"]),
    }


def pool_measurements(
    trace_rows: Iterable[Sequence[Any]],
    metric_rows: Iterable[Sequence[Any]],
    gpus_per_worker: Mapping[str, int] | int = 1,
    min_saturated_s: float = 60.0,
    default_pool: str = "chat",
) -> dict[str, PoolMeasurement]:
    """Per-pool per-GPU throughput from the rows of `traces_sql` and `metrics_sql`.

    A worker counts as measured at capacity when it was saturated for `min_saturated_s`;
    the pool's rate is the mean over those workers, else over busy workers (lower bound),
    else completion tokens ÷ (window × workers) from the traces (lower bound). Rows with no
    pool (written before pools existed) belong to `default_pool`."""
    traces: dict[str, dict[str, Any]] = {}
    for t in _rows(trace_rows, TRACES_COLUMNS):
        pool = t["pool"] or default_pool
        traces[pool] = _merge(traces[pool], t) if pool in traces else t
    workers: dict[str, list[dict[str, Any]]] = {}
    for m in _rows(metric_rows, METRICS_COLUMNS):
        workers.setdefault(m["pool"] or default_pool, []).append(m)

    def gpus(pool: str) -> int:
        n = gpus_per_worker if isinstance(gpus_per_worker, int) else gpus_per_worker.get(pool, 1)
        return max(1, int(n))

    out = {}
    for pool in sorted(set(traces) | set(workers)):
        t, ws = traces.get(pool), workers.get(pool, [])
        saturated = [w for w in ws if w["saturated_s"] >= min_saturated_s]
        busy = [w for w in ws if w["busy_s"] > 0]
        max_seqs = None
        mix = None
        if saturated:
            rate = sum(w["saturated_generated"] / w["saturated_s"] for w in saturated)
            rate /= len(saturated)
            max_seqs = max(w["max_running"] for w in saturated) / gpus(pool)
            generated = sum(w["saturated_generated"] for w in saturated)
            if generated:
                mix = sum(w["saturated_prefilled"] for w in saturated) / generated
            how = f"worker_metrics, {len(saturated)} saturated worker(s)"
        elif busy:
            rate = sum(w["busy_generated"] / w["busy_s"] for w in busy) / len(busy)
            how = f"worker_metrics, {len(busy)} busy worker(s), never saturated: a lower bound"
        elif t and t["workers"] and t["last_ms"] > t["first_ms"]:
            window_s = (t["last_ms"] - t["first_ms"]) / 1000
            rate = t["completion_tokens"] / window_s / t["workers"]
            how = "traces: completion tokens over the window per worker, a lower bound"
        else:
            continue
        if rate <= 0:
            continue
        user_speed = None
        ttft = None
        if t:
            if t["decode_s"] and t["decode_s"] > 0:
                user_speed = t["completion_tokens"] / t["decode_s"]
            ttft = float(t["ttft_p99_ms"]) if t["ttft_p99_ms"] is not None else None
            if mix is None and t["completion_tokens"]:
                uncached = t["prompt_tokens"] - t["cached_prompt_tokens"]
                mix = uncached / t["completion_tokens"]
        out[pool] = PoolMeasurement(
            pool=pool,
            tokens_per_s_per_gpu=rate / gpus(pool),
            ttft_p99_ms=ttft if ttft and ttft > 0 else None,
            user_tokens_per_s=user_speed,
            max_seqs_per_gpu=max_seqs if max_seqs else None,
            saturated=bool(saturated),
            prompt_tokens_per_output_token=mix,
            source=f"clickhouse ({how})",
        )
    return out


def query_clickhouse(client: Any, hours: float, db: str = DEFAULT_DATABASE) -> tuple[list, list]:
    """Run both queries on a clickhouse-connect client (I/O; see `pool_measurements`)."""
    traces = client.query(traces_sql(hours, db)).result_rows
    metrics = client.query(metrics_sql(hours, db)).result_rows
    return list(traces), list(metrics)


# --- applying them -------------------------------------------------------------------------


def apply(
    hardware: Hardware, measured: Mapping[str, PoolMeasurement]
) -> tuple[Hardware, list[str]]:
    """`hardware` with each measured pool's figures written over the assumed ones, and
    messages for what was not applied. A lower bound (never saturated) can only raise a
    pool's rate: one below the assumed rate says nothing about capacity, so the assumed rate
    stays (the latencies are still taken)."""
    pools: dict[str, PoolHardware] = dict(hardware.pools)
    messages = []
    for name, m in measured.items():
        hw = pools.get(name)
        if hw is None:
            messages.append(f"measured pool {name!r} is not in the plan: ignored")
            continue
        latency = {
            "ttft_s": m.ttft_p99_ms / 1000 if m.ttft_p99_ms else hw.ttft_s,
            "user_tokens_per_s": m.user_tokens_per_s or hw.user_tokens_per_s,
        }
        if not m.saturated and m.tokens_per_s_per_gpu <= hw.decode_tokens_per_s_per_gpu:
            messages.append(
                f"{name}: measured {m.tokens_per_s_per_gpu:,.1f} tokens/s per GPU below "
                f"capacity (a lower bound under the assumed "
                f"{hw.decode_tokens_per_s_per_gpu:,.0f}): rate kept, latencies taken"
            )
            pools[name] = replace(hw, **latency, source=f"{hw.source} + latency {m.source}")
            continue
        pools[name] = replace(
            hw,
            **latency,
            decode_tokens_per_s_per_gpu=m.tokens_per_s_per_gpu,
            prefill_tokens_per_s_per_gpu=m.prefill_tokens_per_s_per_gpu,
            max_seqs_per_gpu=m.max_seqs_per_gpu or hw.max_seqs_per_gpu,
            source=m.source + ("" if m.saturated else " [lower bound]"),
        )
    return replace(hardware, pools=pools), messages
