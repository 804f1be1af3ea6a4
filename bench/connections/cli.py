"""`python -m bench.connections`: the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from bench.connections.common import progress
from bench.connections.report import plot, print_table
from bench.connections.run import EdgeRun, run_direct
from bench.connections.stats import quantiles, versus
from bench.connections.system import raise_nofile
from bench.plotting import RESULTS


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.connections",
        description=sys.modules["bench.connections"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--connections",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1000, 10000],
        help="concurrent streams per run, comma-separated (the first is the baseline)",
    )
    parser.add_argument("--tokens-per-s", type=float, default=20.0, help="per stream")
    parser.add_argument(
        "--max-offered",
        type=float,
        default=5000.0,
        help="cap on all streams' tokens/s together (0: none); see the module doc",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window")
    parser.add_argument("--direct-seconds", type=float, default=6.0, help="direct baseline")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--steps-per-s", type=float, default=200, help="pump decode steps a second")
    parser.add_argument("--resume", type=int, default=200, help="streams dropped and resumed")
    parser.add_argument("--resume-gap-s", type=float, default=0.5, help="offline before reconnect")
    parser.add_argument("--resume-rate", type=float, default=50, help="connections dropped per s")
    parser.add_argument("--create-rate", type=float, default=2000, help="turn.create per s, max")
    parser.add_argument(
        "--create-concurrency", type=int, default=64, help="turn.create unanswered at once"
    )
    parser.add_argument("--finish-rate", type=float, default=2000, help="answers ended per s")
    parser.add_argument("--connect-concurrency", type=int, default=50, help="per client process")
    parser.add_argument("--per-client-proc", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="py-spy the largest run's edge")
    parser.add_argument(
        "--door",
        choices=["websocket", "sse"],
        default="websocket",
        help="the clients' door: WebSocket, or the HTTP door's Server-Sent Events",
    )
    parser.add_argument(
        "--edge-gc",
        type=gc_modes,
        default=["keeper"],
        help="the edge's garbage collection, comma-separated to compare in one run (each mode "
        "at each --connections; the first row is the baseline): keeper (as shipped: "
        "runtime/heap.py), cpython (CPython's collector alone), off (no cyclic collector: a "
        "diagnosis, not a setting)",
    )
    args = parser.parse_args()

    from runtime.settings import Settings

    limit = raise_nofile()
    base = Settings.from_env()
    started = time.perf_counter()
    progress(f"RLIMIT_NOFILE {limit}; {os.cpu_count()} cores; logs in {base.state_path / 'logs'}")
    rows: list[dict[str, Any]] = []
    for n in args.connections:
        needed = n + 200
        if needed > limit:
            progress(f"[{n}] needs ~{needed} fds in the edge process, the limit is {limit}")
        for gc_mode in args.edge_gc:
            print(f"[{n} connections, edge gc {gc_mode}]", file=sys.stderr, flush=True)
            direct = run_direct(n, args, base)
            progress(
                f"[{n}] direct: {direct['tokens_per_s']:.0f} tokens/s, delay p50 "
                f"{direct['delay_ms']['p50']:.1f} p99 {direct['delay_ms']['p99']:.1f} ms"
            )
            row = EdgeRun(n, args, base, gc_mode).measure(direct)
            row["direct"] = direct
            rows.append(row)
    for r in rows[1:]:
        r["versus_baseline"] = versus(r, rows[0])
    print_table(rows)
    write_results(rows, args, limit)
    print(f"total {time.perf_counter() - started:.0f} s")


GC_MODES = ("keeper", "cpython", "off")


def gc_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    wrong = [m for m in modes if m not in GC_MODES]
    if not modes or wrong:
        raise argparse.ArgumentTypeError(f"edge gc modes are {', '.join(GC_MODES)}; got {text!r}")
    return modes


def write_results(rows: list[dict[str, Any]], args: argparse.Namespace, limit: int) -> None:
    """The JSON (delays as quantiles) and the plot, named after the door."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    slim = []
    for r in rows:
        kept = {k: v for k, v in r.items() if k not in ("delays", "direct", "resume_samples")}
        kept["delay_quantiles_ms"] = quantiles(r["delays"])
        kept["direct"] = {k: v for k, v in r["direct"].items() if k != "delays"}
        kept["direct"]["delay_quantiles_ms"] = quantiles(r["direct"]["delays"])
        kept["resume_samples_ms"] = r["resume_samples"]
        slim.append(kept)
    machine = {"cores": os.cpu_count(), "nofile": limit}
    name = "connections" if args.door == "websocket" else f"connections-{args.door}"
    (RESULTS / f"{name}.json").write_text(
        json.dumps({"args": vars(args), "machine": machine, "rows": slim}, indent=1, default=str)
    )
    plot(rows, args)
    print(f"\nwrote bench/results/{name}.json and bench/figures/{name}.png")
