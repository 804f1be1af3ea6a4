"""The capacity plan as the text report `python -m infra.capacity` prints, and as JSON. Pure
formatting of a `Plan`; no I/O."""

# ruff: noqa: RUF001, RUF003  (× ÷ – are the arithmetic this module shows)
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from infra.capacity.model import Plan, Workload
from infra.capacity.seed import SEED_FIGURES, figures, reconstruct


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
    lines += render_fleet(result)
    if result.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in result.notes]
    return "\n".join(lines)


def render_fleet(result: Plan) -> list[str]:
    """The non-GPU fleet at peak: processes per role, brokers, Redis, and what they rest on."""
    f, p = result.fleet, result.inputs.platform
    fp, costs = p.fleet, p.costs
    q = result.load.peak_qps
    lines = [
        "",
        f"Fleet around the GPUs at peak ({_n(q, 1)} turns/s; CPU per turn above idle from "
        f"{f.source})",
    ]
    rows = [
        [r.name, f"{r.cpu_ms_per_turn:.2f}", f"{r.cores_peak:,.1f}", _n(r.processes), r.bound]
        for r in f.roles
    ]
    b, rd = f.brokers, f.redis
    rows.append(
        [
            f"kafka brokers (RF {fp.replication_factor})",
            f"{costs.cpu_ms_per_turn.get('broker', 0):.2f}",
            f"{b.cores:,.1f}",
            _n(b.brokers),
            b.bound,
        ]
    )
    rows.append(
        [
            f"redis shards (+{fp.redis_replicas_per_shard} replica each)",
            f"{costs.cpu_ms_per_turn.get('redis', 0):.2f}",
            f"{rd.cores:,.1f}",
            f"{_n(rd.shards)} ({_n(rd.instances)} instances)",
            "commands" if rd.by_commands > rd.by_cpu else "cpu",
        ]
    )
    lines += _table(rows, ["role", "CPU ms/turn", "cores", "processes", "bound"])
    lines.append(
        f"  {f.cpu_ms_per_turn_total:.1f} ms of CPU per turn in all, {f.cores_total:,.0f} cores "
        f"at peak; processes at ≤ {fp.role_cpu_utilisation:.0%} of a core, ≥ "
        f"{fp.min_processes_per_role} per role"
    )
    lines.append(
        f"  kafka: {_n(b.records_per_s)} records/s ({f.records_per_turn:.1f} per turn), "
        f"{b.mb_per_s:,.0f} MB/s replicated, {_n(b.partition_replicas)} partition replicas; "
        f"brokers by CPU {b.by_cpu}, by bytes {b.by_bytes}, by partitions {b.by_partitions} "
        f"({fp.broker_cores} cores at ≤ {fp.broker_cpu_utilisation:.0%}, "
        f"{fp.broker_mb_per_s:g} MB/s, {_n(fp.broker_partitions)} partitions each)"
    )
    lines.append(
        f"  redis: {_n(rd.commands_per_s)} commands/s ({costs.redis_commands_per_turn:.0f} per "
        f"turn); shards by CPU {rd.by_cpu}, by commands {rd.by_commands} "
        f"({_n(fp.redis_commands_per_s_per_shard)}/s each)"
    )
    output = sum(pp.share * pp.output_tokens for pp in result.pools)
    if costs.answer_tokens and output > costs.answer_tokens * 1.5:
        lines.append(
            f"  measured on {costs.answer_tokens:g}-token answers, the workload's are "
            f"{output:,.0f}: per-token work (the relay's Redis calls, edge delivery, safety "
            "windows) is under-counted; measure with `python -m bench.cost --max-tokens "
            f"{output:.0f}` and pass --from-cost"
        )
    return lines


def render_seed(result: Plan, consumer_day: Plan | None = None) -> str:
    """The seed's worked example recomputed from its inputs beside what the seed wrote, then
    where the planner's own model differs (the same workload), and why."""
    w = result.inputs.workload
    r = reconstruct(w, result.inputs.hardware)
    rows = []
    for fig in figures(r):
        value = fig.ours
        shown = (
            f"{value:.1%}"
            if fig.name == "autoscaling saves"
            else _usd(value)
            if fig.name.startswith("$")
            else _n(value, 1 if value != int(value) else 0)
        )
        rows.append([fig.name, fig.seed, shown, "yes" if fig.matches else "NO"])
    lines = [
        "The seed's worked example (docs/architecture.md §4), recomputed from its own inputs",
        "",
        f"  inputs: {_n(w.dau)} DAU × {w.sessions_per_user_per_day:g} sessions × "
        f"{w.rounds_per_session:g} rounds, {w.active_hours_per_day:g} active hours, "
        f"×{w.peak_factor:g} burst, {_n(w.prompt_tokens)} + {_n(w.output_tokens)} tokens, "
        f"{_n(result.inputs.hardware.seed_tokens_per_s_per_gpu)} tokens/s per GPU, "
        f"${result.inputs.hardware.seed_gpu_usd_per_hour:g}/GPU-h",
        "",
    ]
    lines += _table(rows, ["figure", "seed wrote", "recomputed", "the seed's?"])
    lo, hi = r.floor_fractions
    lines += [
        "",
        f"  static: the seed prices its rounded {_n(r.gpus_peak_rounded)} GPUs around the clock "
        f"({_usd(r.cost_month_static_usd)}); unrounded, {_n(r.gpus_peak, 1)} → "
        f"{_usd(r.cost_month_static_unrounded_usd)}.",
        f"  autoscaled (our reading; the seed gives no arithmetic): the {w.active_hours_per_day:g}"
        f" active hours run the average fleet ({_n(r.gpus_avg, 1)} → whole GPUs), the other "
        f"{24 - w.active_hours_per_day:g} a warm floor of {lo:.0%}–{hi:.0%} of the peak fleet.",
    ]
    if w != Workload():
        lines.append("  (this run's workload is not the seed's: compare with the default run)")
    lines += ["", "Where the planner's own model differs, on the same workload", ""]
    rows = [
        [
            "seed's day (flat active hours)",
            _n(result.load.peak_qps, 1),
            _n(result.gpus_peak),
            _usd(result.cost_month_static_usd),
            _usd(result.cost_month_autoscaled_usd),
        ]
    ]
    if consumer_day is not None:
        rows.append(
            [
                "a consumer day (24 h curve)",
                _n(consumer_day.load.peak_qps, 1),
                _n(consumer_day.gpus_peak),
                _usd(consumer_day.cost_month_static_usd),
                _usd(consumer_day.cost_month_autoscaled_usd),
            ]
        )
    lines += _table(rows, ["planner", "peak QPS", "GPUs peak", "$/month static", "autoscaled"])
    a = result.inputs.autoscaling
    lines += [
        "",
        "  - GPUs: 80% chat / 20% reasoning pools with prefill and decode rates apart (assumed",
        "    H100-class: see --from-bench / --from-clickhouse), ≤ 80% utilisation and the KV",
        "    cache's concurrency bound, instead of one 4,000 tokens/s rate at 100%.",
        f"  - Autoscaled: a replica takes {a.scale_up_lag_min:g} min to start, so an hour is "
        "provisioned for its within-hour",
        "    burst, not its mean: the seed's $300K–400K needs the fleet to follow bursts as fast",
        "    as they come. Off-peak the planner keeps "
        f"max({a.min_replicas} replicas, {a.min_fraction_of_peak:.0%} of peak) per pool.",
        "  - The day: 8 active hours and then a 3× buffer puts the peak at 9× the day's mean",
        "    rate; a consumer day's busiest hour is ~1.9× its mean, and a 3× peak over the mean",
        "    leaves a 1.6× burst inside it: the same 15M requests peak at a third of the QPS.",
        "  - Around the GPUs the seed counts nothing; the fleet above is sized from measured",
        "    CPU, records and Redis commands per turn (bench.cost).",
    ]
    return "\n".join(lines)


def to_json(result: Plan) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data["load"]["tokens_per_s_avg"] = result.load.tokens_per_s_avg
    data["load"]["tokens_per_s_peak"] = result.load.tokens_per_s_peak
    data["seed_figures"] = dict(SEED_FIGURES)
    return data
