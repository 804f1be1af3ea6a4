"""Load test: ramp the offered turns/s until the latency target breaks (the knee), see which
process saturates first, then soak at a steady rate and watch every process's memory, open
file descriptors and the consumer groups' lag.

    python -m bench.load ramp --rates 2,4,8,16,32 --step-s 20 --ttft-p99-ms 1000
    python -m bench.load soak --rate 4 --duration-s 1800

The whole stack runs as in production (one process per role, `infra.stack`), on the local
services, in a namespace of its own. Arrivals are open-loop (Poisson at the offered rate):
a slow system does not slow the load down, so queues show up as latency and lost turns
instead of hiding. Each arrival is the next turn of one of many conversations (multi-turn,
so history and the assembly job's state are exercised); a conversation whose previous
answer is still running is skipped for a free one. Every second the runner samples each
process's CPU (% of one core), resident memory and open file descriptors (psutil): the
Python roles, Kafka and Redis; a soak also reads the lag of the run's consumer groups every
15 s. The judgements (knee, busiest process, slopes) are `bench.knee`'s.

With `--profile` the busiest Python role at the knee is sampled with py-spy for 10 s (a
flame graph SVG next to the results) when py-spy is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import psutil
import uvloop

from bench.knee import Step, bounded, busiest, find_knee, growth_per_minute
from bench.namespace import drop_namespace
from bench.pipeline_latency import start_pipeline
from bench.stats import percentile
from infra.stack import REPO
from runtime.kafka_topics import ensure_topics
from runtime.processes import Child, free_port, stop_roles
from runtime.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ErrorEvent, ResponseDelta, ResponseDone

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"
PROMPTS = (
    "Tell me about the history of the bicycle.",
    "And what changed in the last fifty years?",
    "Summarise that in two sentences.",
)


class Watch:
    """Samples CPU, memory and open file descriptors of named processes once a second, in a
    thread-free loop."""

    def __init__(self, processes: dict[str, psutil.Process]) -> None:
        self.processes = processes
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.rss: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.fds: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.started = time.monotonic()
        for proc in processes.values():
            with contextlib.suppress(psutil.Error):
                proc.cpu_percent(None)  # the first call primes the counter

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic() - self.started
            for name, proc in self.processes.items():
                try:
                    self.cpu[name].append(proc.cpu_percent(None))
                    self.rss[name].append((now, proc.memory_info().rss / 2**20))
                    self.fds[name].append((now, float(proc.num_fds())))
                except psutil.Error:
                    continue

    def cpu_since(self, mark: dict[str, int]) -> dict[str, float]:
        """Mean CPU of each process since `mark` (sample counts from `marks()`)."""
        return {
            name: sum(values[mark.get(name, 0) :]) / max(1, len(values) - mark.get(name, 0))
            for name, values in self.cpu.items()
        }

    def marks(self) -> dict[str, int]:
        return {name: len(values) for name, values in self.cpu.items()}


async def watch_lag(
    bootstrap: str, namespace: str, samples: list[tuple[float, float]], every_s: float = 15.0
) -> None:
    """Every `every_s`, the records the run's consumer groups (those of its namespace) have
    not committed yet, all topics and partitions summed: a lag that grows is a stage that
    falls behind even while latency still looks fine."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    ends = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await ends.start()
    started = time.monotonic()
    try:
        while True:
            await asyncio.sleep(every_s)
            groups = [g for g, _ in await admin.list_consumer_groups() if g.startswith(namespace)]
            committed = {}
            for group in groups:
                offsets = await admin.list_consumer_group_offsets(group)
                committed |= {(group, tp): meta.offset for tp, meta in offsets.items()}
            if not committed:
                continue
            highs = await ends.end_offsets(list({tp for _, tp in committed}))
            behind = sum(max(0, highs[tp] - offset) for (_, tp), offset in committed.items())
            samples.append((time.monotonic() - started, float(behind)))
    finally:
        await ends.stop()
        await admin.close()


def watched_processes(children: list[Child], home: Path) -> dict[str, psutil.Process]:
    processes = {c.name: psutil.Process(c.process.pid) for c in children}
    for service in ("kafka", "redis"):
        pidfile = home / "run" / f"{service}.pid"
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            processes[service] = psutil.Process(int(pidfile.read_text().strip()))
    return processes


class Load:
    """Open-loop arrivals over a pool of connections and conversations."""

    def __init__(self, clients: list[EdgeClient], *, max_tokens: int, seed: int = 0) -> None:
        self.clients = clients
        self.max_tokens = max_tokens
        self.random = random.Random(seed)
        self.busy: set[str] = set()
        self.rounds: dict[str, int] = {}
        self.in_flight = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def _conversation(self) -> tuple[EdgeClient, str] | None:
        for _ in range(64):
            index = self.random.randrange(len(self.clients) * 8)
            conversation = f"load-{index}"
            if conversation not in self.busy:
                return self.clients[index % len(self.clients)], conversation
        return None

    async def step(self, step: Step) -> None:
        """Offer `step.rate` turns/s for `step.seconds`, then wait for the stragglers."""
        deadline = time.monotonic() + step.seconds
        while (now := time.monotonic()) < deadline:
            await asyncio.sleep(min(self.random.expovariate(step.rate), deadline - now))
            if time.monotonic() >= deadline:
                break
            step.offered += 1
            picked = self._conversation()
            if picked is None:  # every conversation is answering: the system is behind
                step.errors["no_free_conversation"] = step.errors.get("no_free_conversation", 0) + 1
                continue
            task = asyncio.create_task(self._turn(step, *picked))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=120)

    async def _turn(self, step: Step, client: EdgeClient, conversation: str) -> None:
        self.busy.add(conversation)
        self.in_flight += 1
        step.streams_max = max(step.streams_max, self.in_flight)
        sent = time.perf_counter()
        try:
            n = self.rounds.get(conversation, 0)
            self.rounds[conversation] = n + 1
            text = PROMPTS[n % len(PROMPTS)]
            turn_id = await client.start_turn(conversation, text, max_tokens=self.max_tokens)
            step.accepted += 1
            first = True
            async for event in client.events(turn_id, wait_s=120):
                if isinstance(event, ResponseDelta) and first:
                    step.ttft_ms.append((time.perf_counter() - sent) * 1000)
                    first = False
                elif isinstance(event, ErrorEvent):
                    step.errors[event.code] = step.errors.get(event.code, 0) + 1
                elif isinstance(event, ResponseDone):
                    if event.error is not None:
                        code = event.error.code
                        step.errors[code] = step.errors.get(code, 0) + 1
                    else:
                        step.completed += 1
                        step.e2e_ms.append((time.perf_counter() - sent) * 1000)
        except TurnRejected as rejected:
            code = rejected.error.code
            step.errors[code] = step.errors.get(code, 0) + 1
        except TimeoutError:
            step.errors["client_timeout"] = step.errors.get("client_timeout", 0) + 1
        finally:
            self.in_flight -= 1
            self.busy.discard(conversation)


def print_step(step: Step) -> None:
    top, cpu = busiest(step.cpu)
    errors = sum(step.errors.values())
    print(
        f"{step.rate:7.1f} {step.offered:8d} {step.completed:9d} {step.throughput:8.1f} "
        f"{percentile(step.ttft_ms, 50):8.0f} {percentile(step.ttft_ms, 99):8.0f} "
        f"{step.streams_max:7d} {errors:6d}   {top} {cpu:.0f}%",
        flush=True,
    )


def profile(pid: int, out: Path, seconds: int = 10) -> Path | None:
    """A py-spy flame graph of a process, if py-spy is available."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not installed: no profile", file=sys.stderr)
        return None
    result = subprocess.run(
        # --gil: only the thread holding the GIL, i.e. where this process's Python CPU goes
        [spy, "record", "--pid", str(pid), "--duration", str(seconds), "-o", str(out), "--gil"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out if result.returncode == 0 and out.exists() else None


def plot_ramp(steps: list[Step], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [s.rate for s in steps]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.plot(rates, [percentile(s.ttft_ms, 50) for s in steps], "o-", label="TTFT p50")
    left.plot(rates, [percentile(s.ttft_ms, 99) for s in steps], "o-", label="TTFT p99")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("offered turns/s")
    left.set_ylabel("ms")
    twin = left.twinx()
    twin.plot(rates, [s.throughput for s in steps], "s--", color="gray", label="completed/s")
    twin.set_ylabel("completed turns/s")
    left.legend(loc="upper left", fontsize=8)
    peak = {n: max(s.cpu.get(n, 0.0) for s in steps) for s in steps for n in s.cpu}
    names = sorted(peak, key=lambda n: -peak[n])
    bottom = [0.0] * len(steps)
    for name in names:
        values = [s.cpu.get(name, 0.0) for s in steps]
        right.bar([str(r) for r in rates], values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_xlabel("offered turns/s")
    right.set_ylabel("CPU, % of one core (stacked)")
    right.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_soak(
    rss: dict[str, list[tuple[float, float]]],
    out: Path,
    title: str,
    *,
    fds: dict[str, list[tuple[float, float]]] | None = None,
    lag: list[tuple[float, float]] | None = None,
) -> None:
    """Memory per process; with them, open file descriptors per process and the consumer
    groups' lag, each against minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # (label, series by name, log scale)
    panels: list[tuple[str, dict[str, list[tuple[float, float]]], bool]] = [
        ("resident memory (MiB)", rss, True)
    ]
    if fds is not None:
        panels.append(("open file descriptors", fds, True))
    if lag is not None:
        panels.append(("consumer lag (records, all groups)", {"": lag}, False))
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 3.6 * len(panels)), sharex=True, squeeze=False
    )
    column = [row[0] for row in axes]
    for ax, (label, series, log_scale) in zip(column, panels, strict=True):
        for name, samples in sorted(series.items()):
            if samples:
                ax.plot([t / 60 for t, _ in samples], [v for _, v in samples], label=name)
        ax.set_ylabel(label)
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    column[0].legend(fontsize=7, ncol=2)
    column[0].set_title(title)
    column[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


async def run(args: argparse.Namespace) -> dict:
    base = Settings.from_env()
    settings = Settings.from_env(
        namespace=f"load-{uuid.uuid4().hex[:6]}",
        edge_port=free_port(),
        engine=args.engine,
        fake_token_interval_ms=args.token_interval_ms,
        max_inflight_turns=args.max_inflight,
    )
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    children = await asyncio.to_thread(
        start_pipeline, settings, args.engine, base.state_path / "logs"
    )
    watch = Watch(watched_processes(children, base.state_path))
    watcher = asyncio.create_task(watch.run())
    url = f"ws://127.0.0.1:{settings.edge_port}/"
    result: dict = {"mode": args.mode, "engine": args.engine, "max_tokens": args.max_tokens}
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    EdgeClient.connect(url, mint_token(settings.auth_secret, f"u{i}", "bench"))
                )
                for i in range(args.connections)
            ]
            load = Load(clients, max_tokens=args.max_tokens)
            await load.step(Step(rate=2, seconds=5))  # warm-up: groups joined, caches filled
            if args.mode == "ramp":
                result |= await ramp(args, load, watch, children)
            else:
                lag: list[tuple[float, float]] = []
                lag_watch = asyncio.create_task(
                    watch_lag(settings.kafka_bootstrap, settings.namespace, lag)
                )
                try:
                    result |= await soak(args, load, watch, lag)
                finally:
                    lag_watch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await lag_watch
    finally:
        watcher.cancel()
        await asyncio.to_thread(stop_roles, children)
        await drop_namespace(settings)
    return result


async def ramp(args, load: Load, watch: Watch, children: list[Child]) -> dict:
    rates = [float(r) for r in args.rates.split(",")]
    print(
        f"{'rate/s':>7} {'offered':>8} {'completed':>9} {'done/s':>8} {'ttft50':>8} "
        f"{'ttft99':>8} {'streams':>7} {'errors':>6}   busiest",
        flush=True,
    )
    steps: list[Step] = []
    for rate in rates:
        mark = watch.marks()
        step = Step(rate=rate, seconds=args.step_s)
        await load.step(step)
        step.cpu = watch.cpu_since(mark)
        steps.append(step)
        print_step(step)
        knee = find_knee(steps, ttft_p99_ms=args.ttft_p99_ms, min_completion=args.min_completion)
        if knee.broken is not None and args.stop_at_knee:
            break
    knee = find_knee(steps, ttft_p99_ms=args.ttft_p99_ms, min_completion=args.min_completion)
    at = knee.broken or steps[-1]
    top, cpu = busiest(at.cpu)
    sustained = knee.sustained
    print(
        f"\nknee: sustained {sustained.rate if sustained else 0:.1f} turns/s "
        f"({sustained.throughput if sustained else 0:.1f} completed/s, "
        f"{sustained.streams_max if sustained else 0} streams at once); "
        f"broke at {knee.broken.rate if knee.broken else '-'} turns/s: {knee.reason}"
    )
    cores = psutil.cpu_count() or 1
    total = sum(at.cpu.values())
    print(
        f"the stack's processes used {total:.0f}% of {cores * 100}% ({cores} cores) there; "
        f"the busiest: {top} at {cpu:.0f}% of one core"
    )
    title = f"load ramp ({args.engine} engine, {args.max_tokens} tokens/answer)"
    FIGURES.mkdir(parents=True, exist_ok=True)
    plot_ramp(steps, FIGURES / f"load-ramp-{args.engine}.png", title)
    flame = None
    if args.profile:
        pids = {c.name: c.process.pid for c in children}
        if top in pids:
            mark_step = Step(rate=at.rate, seconds=12)
            task = asyncio.create_task(load.step(mark_step))
            flame = await asyncio.to_thread(
                profile, pids[top], FIGURES / f"load-profile-{args.engine}.svg"
            )
            await task
    return {
        "targets": {"ttft_p99_ms": args.ttft_p99_ms, "min_completion": args.min_completion},
        "steps": [
            {
                **{k: v for k, v in asdict(s).items() if k not in ("ttft_ms", "e2e_ms")},
                "ttft_p50_ms": percentile(s.ttft_ms, 50),
                "ttft_p99_ms": percentile(s.ttft_ms, 99),
                "e2e_p99_ms": percentile(s.e2e_ms, 99),
                "throughput": s.throughput,
            }
            for s in steps
        ],
        "knee": {
            "sustained_rate": sustained.rate if sustained else 0,
            "sustained_throughput": sustained.throughput if sustained else 0,
            "sustained_streams": sustained.streams_max if sustained else 0,
            "broken_rate": knee.broken.rate if knee.broken else None,
            "reason": knee.reason,
            "busiest": top,
            "busiest_cpu": cpu,
            "stack_cpu": total,
            "machine_cpu": cores * 100,
        },
        "profile": str(flame) if flame else None,
    }


async def soak(args, load: Load, watch: Watch, lag: list[tuple[float, float]]) -> dict:
    started = time.monotonic()
    total = Step(rate=args.rate, seconds=0)
    minutes = max(1, math.ceil(args.duration_s / 60))
    for minute in range(minutes):
        seconds = min(60.0, args.duration_s - minute * 60)
        step = Step(rate=args.rate, seconds=seconds)
        await load.step(step)
        total.seconds += seconds
        for name in ("offered", "accepted", "completed"):
            setattr(total, name, getattr(total, name) + getattr(step, name))
        for code, n in step.errors.items():
            total.errors[code] = total.errors.get(code, 0) + n
        total.ttft_ms += step.ttft_ms
        rss = ", ".join(
            f"{name} {samples[-1][1]:.0f}" for name, samples in sorted(watch.rss.items()) if samples
        )
        behind = f"; lag {lag[-1][1]:.0f} records" if lag else ""
        print(
            f"[{minute + 1}/{minutes} min] {step.completed}/{step.offered} turns, "
            f"TTFT p99 {percentile(step.ttft_ms, 99):.0f} ms{behind}; RSS MiB: {rss}",
            flush=True,
        )
    growth = {name: growth_per_minute(samples) for name, samples in watch.rss.items()}
    ok = {name: bounded(s, max_mib_per_min=args.max_growth) for name, s in watch.rss.items()}
    fd_growth = {name: growth_per_minute(samples) for name, samples in watch.fds.items()}
    lag_growth = growth_per_minute(lag)
    print(f"\nsoak: {time.monotonic() - started:.0f} s at {args.rate} turns/s")
    print(
        f"{'process':>20} {'start MiB':>10} {'end MiB':>8} {'MiB/min (2nd half)':>19} "
        f"{'fds start':>10} {'end':>5} {'fds/min':>8}"
    )
    for name, samples in sorted(watch.rss.items()):
        if samples:
            verdict = "" if ok[name] else "  GROWS"
            fds = watch.fds.get(name) or [(0.0, 0.0)]
            print(
                f"{name:>20} {samples[0][1]:10.0f} {samples[-1][1]:8.0f} "
                f"{growth[name]:19.2f} {fds[0][1]:10.0f} {fds[-1][1]:5.0f} "
                f"{fd_growth.get(name, 0.0):8.2f}{verdict}"
            )
    if lag:
        print(
            f"consumer lag (all groups): first {lag[0][1]:.0f}, last {lag[-1][1]:.0f}, "
            f"max {max(v for _, v in lag):.0f} records; {lag_growth:+.1f} records/min "
            "over the second half"
        )
    FIGURES.mkdir(parents=True, exist_ok=True)
    plot_soak(
        dict(watch.rss),
        FIGURES / f"load-soak-{args.engine}.png",
        f"soak: {args.rate} turns/s for {args.duration_s / 60:.0f} min ({args.engine} engine)",
        fds=dict(watch.fds),
        lag=lag,
    )
    return {
        "rate": args.rate,
        "duration_s": args.duration_s,
        "offered": total.offered,
        "completed": total.completed,
        "errors": total.errors,
        "ttft_p99_ms": percentile(total.ttft_ms, 99),
        "rss_first_last_mib": {n: (s[0][1], s[-1][1]) for n, s in watch.rss.items() if s},
        "growth_mib_per_min": growth,
        "fds_first_last": {n: (s[0][1], s[-1][1]) for n, s in watch.fds.items() if s},
        "fd_growth_per_min": fd_growth,
        "lag_first_last_max": (lag[0][1], lag[-1][1], max(v for _, v in lag)) if lag else None,
        "lag_growth_per_min": lag_growth,
        "bounded": all(ok.values()),
        "max_growth_mib_per_min": args.max_growth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["ramp", "soak"])
    parser.add_argument("--engine", choices=["fake", "vllm"], default="fake")
    parser.add_argument("--rates", default="2,4,8,16,32,64")
    parser.add_argument("--step-s", type=float, default=20.0)
    parser.add_argument("--ttft-p99-ms", type=float, default=1000.0)
    parser.add_argument("--min-completion", type=float, default=0.99)
    parser.add_argument("--stop-at-knee", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--rate", type=float, default=8.0, help="soak: turns/s")
    parser.add_argument("--duration-s", type=float, default=600.0, help="soak length")
    parser.add_argument("--max-growth", type=float, default=1.0, help="soak: MiB/min allowed")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    parser.add_argument("--max-inflight", type=int, default=256)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    result = uvloop.run(run(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"load-{args.mode}-{args.engine}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out} and bench/figures/load-{args.mode}-{args.engine}.png")


if __name__ == "__main__":
    main()
