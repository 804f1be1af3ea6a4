"""`python -m infra.capacity`: print a capacity plan (inputs, load, GPUs per pool, cost with
and without autoscaling, Kafka partitions, edge processes, CPU roles).

    python -m infra.capacity                       # the seed's example, 1M DAU
    python -m infra.capacity --dau 100000000 --plot day.png
    python -m infra.capacity --seed-example        # the seed's figures beside ours
    python -m infra.capacity --from-bench results.json --json
    python -m infra.capacity --from-clickhouse --hours 24

Exit status: 0, or 2 for bad input (an unreadable results file, inputs out of range,
ClickHouse unreachable).
"""

# ruff: noqa: RUF001, RUF003  (× ÷ – are the arithmetic this module shows)
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from infra.capacity.measured import (
    MeasurementError,
    PoolMeasurement,
    apply,
    load_bench,
    pool_measurements,
    query_clickhouse,
)
from infra.capacity.model import SEED_FIGURES, Inputs, Plan, Workload, plan

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    w = Workload()
    p = argparse.ArgumentParser(
        prog="python -m infra.capacity",
        description="Capacity plan: users → QPS → tokens/s → GPUs → cost, Kafka, edges.",
    )
    p.add_argument("--dau", type=float, default=w.dau, help="daily active users")
    p.add_argument("--sessions", type=float, default=w.sessions_per_user_per_day)
    p.add_argument("--rounds", type=float, default=w.rounds_per_session, help="per session")
    p.add_argument("--prompt-tokens", type=float, default=w.prompt_tokens)
    p.add_argument("--output-tokens", type=float, default=w.output_tokens)
    p.add_argument("--active-hours", type=float, default=w.active_hours_per_day)
    p.add_argument("--peak-factor", type=float, default=w.peak_factor)
    p.add_argument("--prefix-hit", type=float, default=w.prefix_cache_hit_rate)
    p.add_argument("--voice-share", type=float, default=w.voice_share)
    p.add_argument("--gpu-price", type=float, help="USD per GPU-hour, every pool and the seed")
    p.add_argument("--utilisation", type=float, help="target GPU utilisation (default 0.8)")
    p.add_argument("--from-bench", type=Path, metavar="FILE", help="measured per-GPU rates")
    p.add_argument(
        "--bench-pools",
        default="chat,reasoning",
        help="pools a pool-less results file (bench.pipeline_latency) applies to",
    )
    p.add_argument("--from-clickhouse", action="store_true", help="measure from traces")
    p.add_argument("--hours", type=float, default=24, help="ClickHouse window")
    p.add_argument("--min-saturated-s", type=float, default=60.0)
    p.add_argument("--json", action="store_true", help="the plan as JSON on stdout")
    p.add_argument("--plot", type=Path, metavar="FILE", help="PNG of load vs GPUs over a day")
    p.add_argument("--seed-example", action="store_true", help="the seed's figures beside ours")
    return p


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    """The model's inputs from the command line (measurements are applied afterwards)."""
    base = Inputs()
    workload = replace(
        base.workload,
        dau=args.dau,
        sessions_per_user_per_day=args.sessions,
        rounds_per_session=args.rounds,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        active_hours_per_day=args.active_hours,
        peak_factor=args.peak_factor,
        prefix_cache_hit_rate=args.prefix_hit,
        voice_share=args.voice_share,
    )
    hardware = base.hardware
    if args.gpu_price is not None:
        pools = {k: replace(v, gpu_usd_per_hour=args.gpu_price) for k, v in hardware.pools.items()}
        hardware = replace(hardware, pools=pools, seed_gpu_usd_per_hour=args.gpu_price)
    if args.utilisation is not None:
        hardware = replace(hardware, target_utilisation=args.utilisation)
    return replace(base, workload=workload, hardware=hardware)


def _measure(args: argparse.Namespace, inputs: Inputs, err: TextIO) -> Inputs:
    measured: dict[str, PoolMeasurement] = {}
    if args.from_bench:
        pools = tuple(x.strip() for x in args.bench_pools.split(",") if x.strip())
        measured.update(load_bench(args.from_bench, pools))
    if args.from_clickhouse:
        from infra.clickhouse.client import analyst_client
        from schemas.settings import Settings

        try:
            client = analyst_client(Settings.from_env())
            traces, metrics = query_clickhouse(client, args.hours)
        except Exception as exc:  # the driver's errors have no common base
            raise MeasurementError(f"ClickHouse: {exc}") from exc
        gpus = {k: v.gpus_per_replica for k, v in inputs.hardware.pools.items()}
        found = pool_measurements(traces, metrics, gpus, args.min_saturated_s)
        if not found:
            print(f"ClickHouse: nothing in the last {args.hours:g} h; rates stay assumed", file=err)
        measured.update(found)
    if not measured:
        return inputs
    hardware, messages = apply(inputs.hardware, measured)
    for message in messages:
        print(message, file=err)
    return replace(inputs, hardware=hardware)


# --- formatting ------------------------------------------------------------------------------


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _usd(x: float) -> str:
    if abs(x) >= 1e6:
        return f"${x / 1e6:,.2f}M"
    return f"${x:,.0f}"


def _table(rows: list[Sequence[Any]], header: Sequence[str]) -> list[str]:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for k, r in enumerate(cells):
        first = r[0].ljust(widths[0])
        rest = [c.rjust(widths[i + 1]) for i, c in enumerate(r[1:])]
        out.append("  " + "  ".join([first, *rest]))
        if k == 0:
            out.append("  " + "  ".join("-" * wd for wd in widths))
    return out


def render(result: Plan, registry: dict[str, int] | None = None) -> str:
    """The plan as the readable report the CLI prints."""
    i, load = result.inputs, result.load
    w, h = i.workload, i.hardware
    lines = [f"Capacity plan: {_n(w.dau)} DAU", "", "Inputs"]
    lines.append(
        f"  workload   {w.sessions_per_user_per_day:g} sessions/user/day × "
        f"{w.rounds_per_session:g} rounds; prompt {_n(w.prompt_tokens)} + output "
        f"{_n(w.output_tokens)} tokens; {w.active_hours_per_day:g} active h/day; "
        f"peak ×{w.peak_factor:g}; prefix-cache hit {w.prefix_cache_hit_rate:.0%}; "
        f"voice {w.voice_share:.0%}"
    )
    for pp in result.pools:
        hw = h.pools[pp.name]
        prefill = (
            "in the output rate"
            if hw.prefill_tokens_per_s_per_gpu is None
            else _n(hw.prefill_tokens_per_s_per_gpu)
        )
        lines.append(
            f"  {pp.name:<10} {pp.share:.0%} of requests, prompt {_n(pp.prompt_tokens)} / "
            f"output {_n(pp.output_tokens)}; per GPU prefill {prefill}, decode "
            f"{_n(hw.decode_tokens_per_s_per_gpu)} tok/s, {hw.max_seqs_per_gpu:g} seqs; "
            f"{hw.gpus_per_replica} GPU/replica; {_n(hw.user_tokens_per_s, 1)} tok/s per user; "
            f"TTFT {hw.ttft_s * 1000:.0f} ms; ${hw.gpu_usd_per_hour:.2f}/GPU-h [{hw.source}]"
        )
    a = i.autoscaling
    lines.append(
        f"  GPUs run at ≤ {h.target_utilisation:.0%}; autoscaling floor "
        f"max({a.min_replicas} replicas, {a.min_fraction_of_peak:.0%} of peak), "
        f"+{a.margin:.0%} margin, {a.scale_up_lag_min:g} min scale-up lag"
    )
    lines += ["", "Load"]
    lines.append(
        f"  requests/day {_n(load.requests_per_day)}; QPS average {_n(load.avg_qps, 1)}, "
        f"peak {_n(load.peak_qps, 1)} (busiest hour {_n(max(load.hourly_qps), 1)} "
        f"× within-hour burst {load.burst:.2f})"
    )
    lines.append(
        f"  tokens/s average {_n(load.tokens_per_s_avg)} (prompt "
        f"{_n(load.prompt_tokens_per_s_avg)} + output {_n(load.output_tokens_per_s_avg)}); "
        f"peak {_n(load.tokens_per_s_peak)} (prompt {_n(load.prompt_tokens_per_s_peak)} + "
        f"output {_n(load.output_tokens_per_s_peak)})"
    )
    lines.append(
        f"  at peak: {_n(load.concurrent_streams_peak)} answers streaming (mean answer "
        f"{load.mean_answer_s:.1f} s), {_n(load.concurrent_connections_peak)} connections open"
    )
    lines += ["", "GPUs per pool (peak: max of throughput and concurrency bounds)"]
    rows = []
    for pp in result.pools:
        rows.append(
            [
                pp.name,
                _n(pp.peak_qps, 1),
                _n(pp.concurrent_streams_peak),
                _n(pp.gpus_throughput_peak, 1),
                _n(pp.gpus_concurrency_peak, 1),
                pp.bound,
                _n(pp.gpus_peak),
                _n(pp.gpus_avg),
                _n(pp.gpu_hours_per_day_autoscaled / 24, 1),
                _usd(pp.cost_month_static_usd),
                _usd(pp.cost_month_autoscaled_usd),
            ]
        )
    gpu_hours = sum(pp.gpu_hours_per_day_autoscaled for pp in result.pools)
    rows.append(
        [
            "total",
            _n(load.peak_qps, 1),
            _n(load.concurrent_streams_peak),
            "",
            "",
            "",
            _n(result.gpus_peak),
            _n(result.gpus_avg),
            _n(gpu_hours / 24, 1),
            _usd(result.cost_month_static_usd),
            _usd(result.cost_month_autoscaled_usd),
        ]
    )
    header = [
        "pool",
        "peak QPS",
        "streams",
        "GPUs tput",
        "GPUs conc",
        "bound",
        "GPUs peak",
        "GPUs avg",
        "autoscaled mean",
        "$/month static",
        "$/month autoscaled",
    ]
    lines += _table(rows, header)
    saved = 1 - result.cost_month_autoscaled_usd / result.cost_month_static_usd
    lines.append(
        f"  autoscaling saves {saved:.0%}; GPUs by hour {min(result.hourly_gpus_autoscaled):,}"
        f"–{max(result.hourly_gpus_autoscaled):,} (mean {gpu_hours / 24:,.0f} with the "
        f"scale-up lag); per 1M tokens "
        f"${result.usd_per_million_tokens_static:.3f} static, "
        f"${result.usd_per_million_tokens_autoscaled:.3f} autoscaled"
    )
    s = result.seed
    lines.append(
        f"  seed method (all tokens ÷ {_n(h.seed_tokens_per_s_per_gpu)} tok/s per GPU, "
        f"no headroom): {_n(s.gpus_avg, 1)} GPUs average, {_n(s.gpus_peak, 1)} peak, "
        f"{_usd(s.cost_month_static_usd)}/month static"
    )
    lines += ["", "Kafka partitions (peak; ≥ one per consuming process; 2^k or 3·2^k)"]
    rows = []
    registry = registry or {}
    for t in result.topics:
        rows.append(
            [
                t.name,
                _n(t.msgs_per_s_peak),
                _n(t.mb_per_s_peak, 1),
                ",".join(t.consumers),
                _n(t.consumer_processes),
                _n(t.partitions_for_throughput),
                _n(t.partitions),
                t.cells,
                registry.get(t.name, "–"),
            ]
        )
    header = [
        "topic",
        "msgs/s",
        "MB/s",
        "consumers",
        "procs",
        "for rate",
        "partitions",
        "cells",
        "now",
    ]
    lines += _table(rows, header)
    e = result.edge
    lines += ["", "Edge processes (WebSocket)"]
    lines.append(
        f"  {_n(e.processes)} = max(connections {_n(e.connections_peak)} ÷ "
        f"{_n(i.platform.edge_connections)} = {_n(e.by_connections)}, output tokens/s "
        f"{_n(e.output_tokens_per_s_peak)} ÷ {_n(i.platform.edge_tokens_per_s)} = "
        f"{_n(e.by_tokens)}); connection memory {e.memory_gb:,.1f} GB"
    )
    lines += ["", "CPU roles at peak (measured CPU per turn; one core per process)"]
    lines += _table(
        [[r.name, f"{r.cores_peak:,.1f}", _n(r.processes)] for r in result.roles],
        ["role", "cores", "processes"],
    )
    if result.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in result.notes]
    return "\n".join(lines)


def render_seed(result: Plan) -> str:
    """The seed's worked example beside the seed method and the pool planner."""
    s, load = result.seed, result.load
    f = SEED_FIGURES
    rows = [
        ["DAU", _n(f["dau"]), _n(result.inputs.workload.dau), _n(result.inputs.workload.dau)],
        ["requests/day", "–", _n(s.requests_per_day), _n(load.requests_per_day)],
        ["QPS average", f"~{_n(f['avg_qps'])}", _n(s.avg_qps, 1), _n(load.avg_qps, 1)],
        ["QPS peak", f"~{_n(f['peak_qps'])}", _n(s.peak_qps, 1), _n(load.peak_qps, 1)],
        [
            "tokens/s average",
            _n(f["tokens_per_s"]),
            _n(s.tokens_per_s_avg),
            _n(load.tokens_per_s_avg),
        ],
        ["tokens/s peak", "–", _n(s.tokens_per_s_peak), _n(load.tokens_per_s_peak)],
        ["GPUs average", _n(f["gpus_low"]), _n(s.gpus_avg, 1), _n(result.gpus_avg)],
        ["GPUs peak", f"~{_n(f['gpus_high'])}", _n(s.gpus_peak, 1), _n(result.gpus_peak)],
        [
            "$/month static",
            "–",
            _usd(s.cost_month_static_usd),
            _usd(result.cost_month_static_usd),
        ],
        ["$/month autoscaled", "–", "–", _usd(result.cost_month_autoscaled_usd)],
    ]
    lines = ["The seed's worked example, side by side", ""]
    lines += _table(rows, ["", "seed", "seed method (ours)", "planner (pools)"])
    lines += [
        "",
        "  seed method: 1M DAU × 5 sessions × 9 rounds = 45M requests/day ÷ 86,400 s = 520.8 QPS;",
        "  × peak factor 3 = 1,562.5; × 2,500 tokens = 1.302M / 3.906M tokens/s; ÷ 4,000 tokens/s",
        "  per GPU = 325.5 / 976.6 GPUs. The seed rounds 1,562.5 to ~1,500 and 976.6 to ~1,000;",
        "  no one set of inputs gives 520, 1,500, 325 and 1,000 exactly (infra/capacity/model.py).",
        "  planner: 80% chat / 20% reasoning, prefill and decode apart, 70 tok/s per user,",
        "  KV-cache sequences per GPU, 80% target utilisation, whole replicas.",
    ]
    if result.inputs.workload != Workload():
        lines.append("  (this run's workload is not the seed's: the seed column is for 1M DAU)")
    return "\n".join(lines)


def _registry(result: Plan) -> dict[str, int]:
    """Partitions the topic registry declares today, for the table's "now" column."""
    from schemas.topics import all_topics

    return {t.name: t.partitions for t in all_topics(tuple(p.name for p in result.pools))}


def to_json(result: Plan) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data["load"]["tokens_per_s_avg"] = result.load.tokens_per_s_avg
    data["load"]["tokens_per_s_peak"] = result.load.tokens_per_s_peak
    data["seed_figures"] = dict(SEED_FIGURES)
    return data


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = sys.stderr
    args = build_parser().parse_args(argv)
    try:
        inputs = _measure(args, inputs_from_args(args), err)
        result = plan(inputs)
    except (MeasurementError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_BAD_INPUT
    if args.json:
        json.dump(to_json(result), out, indent=2, default=str)
        out.write("\n")
    elif args.seed_example:
        out.write(render_seed(result) + "\n\n" + render(result, _registry(result)) + "\n")
    else:
        out.write(render(result, _registry(result)) + "\n")
    if args.plot:
        from infra.capacity.plot import save_plot

        path = save_plot(result, args.plot)
        print(f"plot: {path}", file=err)
    return EXIT_OK
