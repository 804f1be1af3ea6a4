"""`python -m infra.capacity`: print a capacity plan (inputs, load, GPUs per pool, cost with
and without autoscaling, Kafka partitions, and the fleet around the GPUs: edges, every worker
role and faust job, brokers, Redis).

    python -m infra.capacity                       # the seed's example, 1M DAU
    python -m infra.capacity --dau 100000000 --plot day.png
    python -m infra.capacity --seed-example        # the seed's figures recomputed, and ours
    python -m infra.capacity --from-cost bench/results/cost-fake.json   # measured costs
    python -m infra.capacity --diurnal consumer    # a 24-hour consumer day, not 8 flat hours
    python -m infra.capacity --from-bench results.json --json
    python -m infra.capacity --from-clickhouse --hours 24

Exit status: 0, or 2 for bad input (an unreadable results file, inputs out of range,
ClickHouse unreachable, a cost file that is not bench.cost's).
"""

# ruff: noqa: RUF003  (× ÷ – are the arithmetic this module shows)
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from infra.capacity.costs import CostFileError, load_cost_bench
from infra.capacity.measured import (
    MeasurementError,
    PoolMeasurement,
    apply,
    load_bench,
    pool_measurements,
    query_clickhouse,
)
from infra.capacity.model import CONSUMER_DIURNAL, Inputs, Plan, Workload, plan
from infra.capacity.report import render, render_seed, to_json

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
    p.add_argument(
        "--diurnal",
        choices=("seed", "consumer"),
        default="seed",
        help="the day's shape: flat over the active hours (the seed's), or a 24-hour consumer "
        "day (sets the active hours to 24)",
    )
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
    p.add_argument(
        "--from-cost",
        type=Path,
        metavar="FILE",
        help="per-turn CPU, records and Redis commands from a bench.cost results file",
    )
    p.add_argument(
        "--cost-level", type=int, help="the concurrency level to read (default: the busiest)"
    )
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
        active_hours_per_day=24 if args.diurnal == "consumer" else args.active_hours,
        peak_factor=args.peak_factor,
        diurnal=CONSUMER_DIURNAL if args.diurnal == "consumer" else None,
        prefix_cache_hit_rate=args.prefix_hit,
        voice_share=args.voice_share,
    )
    hardware = base.hardware
    if args.gpu_price is not None:
        pools = {k: replace(v, gpu_usd_per_hour=args.gpu_price) for k, v in hardware.pools.items()}
        hardware = replace(hardware, pools=pools, seed_gpu_usd_per_hour=args.gpu_price)
    if args.utilisation is not None:
        hardware = replace(hardware, target_utilisation=args.utilisation)
    platform = base.platform
    if args.from_cost:
        platform = replace(platform, costs=load_cost_bench(args.from_cost, args.cost_level))
    return replace(base, workload=workload, hardware=hardware, platform=platform)


def _measure(args: argparse.Namespace, inputs: Inputs, err: TextIO) -> Inputs:
    measured: dict[str, PoolMeasurement] = {}
    if args.from_bench:
        pools = tuple(x.strip() for x in args.bench_pools.split(",") if x.strip())
        measured.update(load_bench(args.from_bench, pools))
    if args.from_clickhouse:
        from runtime.clickhouse.client import analyst_client
        from runtime.settings import Settings

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


def _registry(result: Plan) -> dict[str, int]:
    """Partitions the topic registry declares today, for the table's "now" column."""
    from schemas.topics import all_topics

    return {t.name: t.partitions for t in all_topics(tuple(p.name for p in result.pools))}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = sys.stderr
    args = build_parser().parse_args(argv)
    try:
        inputs = _measure(args, inputs_from_args(args), err)
        result = plan(inputs)
    except (MeasurementError, CostFileError, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_BAD_INPUT
    if args.json:
        json.dump(to_json(result), out, indent=2, default=str)
        out.write("\n")
    elif args.seed_example:
        day = replace(result.inputs.workload, diurnal=CONSUMER_DIURNAL, active_hours_per_day=24)
        consumer = plan(replace(result.inputs, workload=day))
        out.write(render_seed(result, consumer) + "\n\n" + render(result, _registry(result)))
        out.write("\n")
    else:
        out.write(render(result, _registry(result)) + "\n")
    if args.plot:
        from infra.capacity.plot import save_plot

        path = save_plot(result, args.plot)
        print(f"plot: {path}", file=err)
    return EXIT_OK
