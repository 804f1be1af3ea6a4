"""`python -m bench.faults`: break the real stack under load and check the books.

Starts its own Kafka and Redis (the project's scripts, free ports, a temporary
TURNSTREAM_HOME: the shared services are never touched), the roles as child processes (two
inference workers, two edges, preprocessing, assembly, traces, the ClickHouse sink), a
steady load of multi-turn conversations, then one fault at a time:

    worker-kill      kill -9 an inference worker mid-stream, restart it
    kafka-restart    stop the broker, start it again on the same data
    redis-restart    stop Redis, 3 s down, start it on its append-only file
    clickhouse-down  kill -9 the sink (it owns the embedded ClickHouse) for 20 s, restart
    edge-kill        kill -9 an edge with clients attached; they resume on the other
    assembly-kill    kill -9 the assembly faust job, restart it
    traces-kill      kill -9 the traces faust job, restart it
    tools-kill       (--tools; after the others) questions that call a key-value MCP server
                     with side effects: kill -9 the tools worker mid-call, a question sent
                     again, a turn stopped while its call runs, every request redelivered;
                     the books count each call's side effects (bench/faults/tool_books.py)

With --cluster, Kafka is a replicated 3-broker KRaft cluster (replication factor 3,
min.insync.replicas 2, acks=all, idempotent producers), and the faults are its own:

    broker-leader-kill      kill -9 the broker leading the busiest partitions, restart it
    broker-pause            SIGSTOP that broker for 30 s, SIGCONT
    broker-rolling-restart  restart the three one by one, each back in sync before the next
    controller-loss         kill -9 the active KRaft controller, restart it

By default the suite runs twice: on the fake engine, then on vLLM with the bundled model
(its own, lighter load: `VLLM_LOAD`, what a CPU engine on 2 cores sustains). `--engine fake`
or `--engine vllm` runs one pass.

And for each: every accepted turn ended exactly once at its client (completed, or an
explicit error), nothing was answered twice, streamed text is whole, every accepted turn is
once in `turns.completed` and once in ClickHouse `traces`. Prints the fault table and writes
bench/results/faults.json and bench/figures/faults.png (and its copy in bench/results/;
the vLLM pass: faults-vllm.*). Exit status 1 when a scenario's books do not balance.

    python -m bench.faults                       # all faults, fake then vLLM, ~40 min on 2 cores
    python -m bench.faults --engine fake         # the fake engine only, ~12 min
    python -m bench.faults --scenarios worker-kill edge-kill --duration-s 20
    python -m bench.faults --cluster --engine fake  # the cluster's faults, ~7 min
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys

from bench.faults.load import LoadConfig
from bench.faults.report import details, plot, table, to_json, write_json
from bench.faults.runner import ALL_SCENARIOS, SuiteOptions, run_suite
from bench.faults.scenarios import CLUSTER_SCENARIOS, SCENARIOS

ENGINES = ("fake", "vllm")
# vLLM on CPU answers a turn in seconds, not the fake engine's ~1 s: a load it sustains
# (measured 2026-12-05: worker and edge kills balanced at this load)
VLLM_LOAD = LoadConfig(users=4, turns_per_s=0.5)


def parse(argv: list[str] | None = None) -> list[SuiteOptions]:
    """One suite per engine asked for (both by default), in that order."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=list(ALL_SCENARIOS),
        help="default: the seven, or with --cluster the cluster's four",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="a replicated 3-broker Kafka cluster"
    )
    parser.add_argument("--turns-per-s", type=float, default=4.0, help="the load, all users")
    parser.add_argument("--users", type=int, default=8, help="concurrent clients")
    parser.add_argument(
        "--duration-s",
        type=float,
        default=20.0,
        help="load per scenario around the fault: 40%% before it, 60%% after its healing",
    )
    parser.add_argument(
        "--engine", choices=[*ENGINES, "both"], default="both", help="default: fake, then vLLM"
    )
    parser.add_argument("--keep-home", action="store_true", help="keep the logs of the run")
    parser.add_argument(
        "--tools", action="store_true", help="and the tool scenario (tools-kill) after the others"
    )
    args = parser.parse_args(argv)
    default = CLUSTER_SCENARIOS if args.cluster else SCENARIOS
    fake = SuiteOptions(
        scenarios=tuple(args.scenarios or default),
        cluster=args.cluster,
        load=LoadConfig(users=args.users, turns_per_s=args.turns_per_s),
        engine="fake",
        warmup_s=args.duration_s * 0.4,
        after_s=args.duration_s * 0.6,
        keep_home=args.keep_home,
        tools=args.tools,
    )
    vllm = dataclasses.replace(
        fake,
        engine="vllm",
        load=LoadConfig(
            users=min(args.users, VLLM_LOAD.users),
            turns_per_s=min(args.turns_per_s, VLLM_LOAD.turns_per_s),
        ),
    )
    engines = ENGINES if args.engine == "both" else (args.engine,)
    return [fake if engine == "fake" else vllm for engine in engines]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C: services and roles go down


def main() -> None:
    suites = parse()
    signal.signal(signal.SIGTERM, _interrupt)
    ok = True
    for options in suites:
        run = asyncio.run(run_suite(options))
        results = run.scenarios
        print()
        print(f"## {options.engine} engine")
        print(table(results))
        print()
        print(details(results))
        name = "faults-cluster" if options.cluster else "faults"
        name += "-vllm" if options.engine == "vllm" else ""
        json_path = write_json(to_json(options, results), name)
        figure = plot(results, name)
        print(f"\n{json_path}\n{figure}")
        if run.tools is not None:
            print(run.tools.line())
        ok = ok and run.ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
