"""What a turn costs the pipeline: CPU per process, Kafka records and bytes per topic and
Redis commands per turn, over the whole local stack (real Kafka, Redis, embedded ClickHouse).

For each side (this tree, and with `--baseline REF` another commit checked out beside it,
run in the same invocation so both see the same machine), the roles start as processes in a
namespace of their own; the stack is read idle (`--idle-s`), then at each concurrency level
N conversations run turns back to back for `--seconds`, `--repeats` times. Around each window
the benchmark reads every process's CPU (user + system, children included: vLLM's engine
processes, the broker's JVM, Redis), the end offsets of every topic of the namespace (faust's
changelogs included) and Redis's `INFO commandstats`; after the last turn it waits until the
traces of the window's turns reached Kafka, so the analytics roles' work is inside it. Bytes
are counted by reading the window's records back. The arithmetic is `bench/cost_books.py`.
Every turn's text is its own (`distinct`), so the safety checks' caches of recent texts do
not hide their cost.

    python -m bench.cost                                  # this tree, fake engine
    python -m bench.cost --baseline origin/main~3         # side by side with a commit
    python -m bench.cost --baseline main --rounds 2       # A B B A: windows pooled per side
    python -m bench.cost --engine vllm --concurrency 1,16
    python -m bench.cost --baseline HEAD --env TURNSTREAM_DELTA_PACE_MS=50   # a setting's A/B

Prints a table, writes JSON and a plot under bench/results/ (the plot also to bench/figures/).
The spreads are the lowest and highest of the repeats (of every round, with `--rounds`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import zlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psutil
import uvloop
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench.cost_books import (
    Reading,
    Spread,
    Window,
    mean_cpu_percent,
    parse_commandstats,
    spread_by_key,
    strip_namespace,
    total,
)
from bench.load import watched_processes
from bench.namespace import drop_namespace
from bench.pipeline_latency import FAKE_TEXT, stack_settings, start_pipeline
from bench.plotting import save_figure
from bench.stats import percentile
from infra.stack import REPO
from runtime.processes import Child, stop_roles
from runtime.redis import redis_client
from runtime.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ResponseDelta, ResponseDone

RESULTS = REPO / "bench" / "results"
PROMPTS = (
    "Tell me about the history of the bicycle.",
    "And what changed in the last fifty years?",
    "Summarise that in two sentences.",
)


# ---------------------------------------------------------------------------- readings


class Stack:
    """The processes and stores one side's readings come from."""

    def __init__(self, settings: Settings, children: list[Child], home: Path) -> None:
        self.settings = settings
        self.processes = watched_processes(children, home)
        self.kafka = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False
        )
        self.redis = redis_client(settings.redis_url)
        self.partitions: list[TopicPartition] = []

    async def start(self) -> None:
        await self.kafka.start()
        await self.find_partitions()

    async def close(self) -> None:
        await self.kafka.stop()
        await self.redis.aclose()

    async def read(self) -> tuple[Reading, dict[TopicPartition, int]]:
        """The counters now, and the end offsets the record counts were summed from (the
        range `bytes_between` reads back)."""
        at = time.monotonic()
        cpu = {name: _cpu_seconds(p) for name, p in self.processes.items()}
        offsets = await self.end_offsets()
        calls = parse_commandstats(await self.redis.info("commandstats"))
        return Reading(at=at, cpu_s=cpu, records=self._records(offsets), redis_calls=calls), offsets

    async def find_partitions(self) -> None:
        """Every partition of the namespace's topics, faust's changelogs included. Asked once
        the roles are up (the jobs create their changelogs at start), so the windows'
        readings cost the broker no metadata requests."""
        prefix = self.settings.namespace + "."
        admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap)
        await admin.start()
        try:
            topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
            described = await admin.describe_topics(topics)
        finally:
            await admin.close()
        self.partitions = sorted(
            TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]
        )

    async def end_offsets(self) -> dict[TopicPartition, int]:
        return await self.kafka.end_offsets(self.partitions)

    def _records(self, offsets: dict[TopicPartition, int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for tp, end in offsets.items():
            topic = strip_namespace(tp.topic, self.settings.namespace)
            counts[topic] = counts.get(topic, 0) + end
        return counts

    async def records(self) -> dict[str, int]:
        return self._records(await self.end_offsets())

    async def bytes_between(
        self, start: dict[TopicPartition, int], end: dict[TopicPartition, int]
    ) -> dict[str, int]:
        """Key + value + header bytes of the records each topic received between two sets of
        end offsets (read back after the window, outside its CPU accounting)."""
        wanted = {tp: (start.get(tp, 0), e) for tp, e in end.items() if e > start.get(tp, 0)}
        if not wanted:
            return {}
        self.kafka.assign(list(wanted))
        for tp, (first, _) in wanted.items():
            self.kafka.seek(tp, first)
        sizes: dict[str, int] = {}
        left = dict(wanted)
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            batches = await self.kafka.getmany(*left, timeout_ms=1000)
            for tp, records in batches.items():
                topic = strip_namespace(tp.topic, self.settings.namespace)
                for r in records:
                    if r.offset >= wanted[tp][1]:
                        continue
                    headers = sum(len(k) + len(v or b"") for k, v in r.headers or ())
                    size = max(r.serialized_key_size, 0) + max(r.serialized_value_size, 0)
                    sizes[topic] = sizes.get(topic, 0) + size + headers
                if await self.kafka.position(tp) >= wanted[tp][1]:
                    left.pop(tp, None)
        self.kafka.unsubscribe()
        return sizes


def _cpu_seconds(process: psutil.Process) -> float:
    """User + system seconds of a process and its living descendants (and of the children
    it already reaped)."""
    seconds = 0.0
    with contextlib.suppress(psutil.Error):
        t = process.cpu_times()
        seconds += t.user + t.system + t.children_user + t.children_system
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                seconds += c.user + c.system
    return seconds


# ---------------------------------------------------------------------------- load


@dataclass
class LevelRun:
    turns: int = 0
    errors: int = 0
    ttft_ms: list[float] = field(default_factory=list)


async def run_level(
    clients: list[EdgeClient],
    seconds: float,
    max_tokens: int,
    conversation_ids: list[str],
    prompts: tuple[str, ...] = PROMPTS,
) -> LevelRun:
    """Each client runs turns of its own conversation back to back until the deadline, then
    finishes the one it is on (the conversation's history grows from window to window)."""
    run = LevelRun()
    deadline = time.monotonic() + seconds

    async def user(client: EdgeClient, conversation: str) -> None:
        i = 0
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            first = True
            try:
                turn_id = await client.start_turn(
                    conversation,
                    distinct(prompts[i % len(prompts)], conversation, i),
                    max_tokens=max_tokens,
                )
                async for event in client.events(turn_id, wait_s=120):
                    if isinstance(event, ResponseDelta) and first and event.text:
                        run.ttft_ms.append(1000 * (time.perf_counter() - sent))
                        first = False
                    elif isinstance(event, ResponseDone):
                        run.turns += 1
            except (TurnRejected, TimeoutError) as err:
                if not run.errors:
                    print(f"  a turn failed: {err!r}", file=sys.stderr)
                run.errors += 1
                await asyncio.sleep(0.2)
            i += 1

    await asyncio.gather(
        *(user(c, conv) for c, conv in zip(clients, conversation_ids, strict=True))
    )
    return run


def distinct(text: str, conversation: str, i: int) -> str:
    """A turn's text, marked as its own: real traffic rarely repeats a text, and the safety
    classifier remembers recent texts (and the fake engine echoes the prompt), so without
    the mark every check after the first would be a cache hit and its cost would not show."""
    return f"{text} ({_letters(zlib.crc32(conversation.encode()))} {_letters(i)})"


def _letters(n: int) -> str:
    """`n` written in letters (a, b, ... ba): a mark with no digits, which the classifier
    would read as leetspeak and read twice."""
    out = ""
    while True:
        n, digit = divmod(n, 26)
        out = chr(ord("a") + digit) + out
        if n == 0:
            return out


async def wait_for_traces(stack: Stack, before: Reading, turns: int, timeout_s: float = 20) -> None:
    """Until the window's turns have their trace record (the traces job and the sink did
    their part), or the timeout: the analytics work then lands inside the window."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = await stack.records()
        if now.get("traces", 0) - before.records.get("traces", 0) >= turns:
            await asyncio.sleep(0.5)  # the sink's linger, after the trace reached Kafka
            return
        await asyncio.sleep(0.2)
    print(f"  (not every trace arrived within {timeout_s:.0f} s)", file=sys.stderr)


# ---------------------------------------------------------------------------- one side


@dataclass
class SideResult:
    label: str
    idle: list[Window] = field(default_factory=list)  # one per round
    levels: dict[int, list[Window]] = field(default_factory=dict)
    ttft_ms: dict[int, list[float]] = field(default_factory=dict)
    errors: dict[int, int] = field(default_factory=dict)


async def measure_side(label: str, tree: Path, args: argparse.Namespace) -> SideResult:
    base = Settings.from_env()
    levels = [int(x) for x in args.concurrency.split(",")]
    settings = stack_settings("cost", args.engine, args.token_interval_ms, max(levels))
    print(f"[{label}] topics and roles from {tree}", file=sys.stderr)
    await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "runtime.kafka_topics", "--namespace", settings.namespace],
        check=True,
        cwd=tree,
        env={**os.environ, "TURNSTREAM_KAFKA_BOOTSTRAP": settings.kafka_bootstrap},
    )
    roles = tree_roles(tree)
    children = await asyncio.to_thread(
        partial(
            start_pipeline,
            settings,
            args.engine,
            base.state_path / "logs",
            roles=roles,
            cwd=tree,
            extra_env=side_env(args.env) if tree == REPO else None,
        )
    )
    result = SideResult(label)
    stack = Stack(settings, children, base.state_path)
    await stack.start()
    url = f"ws://127.0.0.1:{settings.edge_port}/"
    try:
        async with contextlib.AsyncExitStack() as exits:
            clients = [
                await exits.enter_async_context(
                    EdgeClient.connect(url, mint_token(settings.auth_secret, f"u{i}", "bench"))
                )
                for i in range(max(levels))
            ]
            ids = [f"cost-{i}-{uuid.uuid4().hex[:8]}" for i in range(max(levels))]
            # the fake engine echoes the prompt: FAKE_TEXT makes its answers ~32 tokens long
            prompts = (FAKE_TEXT,) if args.engine == "fake" else PROMPTS
            warm = await run_level(clients[:2], 3, args.max_tokens, ids[:2], prompts)
            print(f"  warm-up: {warm.turns} turns", file=sys.stderr)
            await asyncio.sleep(2)
            before, _ = await stack.read()
            await asyncio.sleep(args.idle_s)
            result.idle = [Window(before, (await stack.read())[0], turns=0)]
            print(
                f"  idle: {total(result.idle[0].cpu_percent()):.1f}% of a core in all",
                file=sys.stderr,
            )
            for n in levels:
                result.levels[n], result.ttft_ms[n], result.errors[n] = [], [], 0
                for r in range(args.repeats):
                    before, start = await stack.read()
                    run = await run_level(
                        clients[:n], args.seconds, args.max_tokens, ids[:n], prompts
                    )
                    if not run.turns:
                        raise RuntimeError(f"no turn completed at {n} conversations")
                    await wait_for_traces(stack, before, run.turns)
                    after, end = await stack.read()
                    sizes = await stack.bytes_between(start, end)
                    window = Window(before, after, run.turns, sizes)
                    result.levels[n].append(window)
                    result.ttft_ms[n] += run.ttft_ms
                    result.errors[n] += run.errors
                    print(
                        f"  {n:>3} conversations, repeat {r + 1}/{args.repeats}: "
                        f"{run.turns} turns, {total(window.cpu_ms_per_turn()):.1f} ms CPU "
                        f"and {total(window.records_per_turn()):.1f} records per turn",
                        file=sys.stderr,
                    )
    finally:
        await stack.close()
        await asyncio.to_thread(stop_roles, children)
        await drop_namespace(settings)
    return result


def merge(a: SideResult, b: SideResult) -> SideResult:
    """Two rounds of one side as one: their windows pooled (the spreads then cover the
    differences between runs too, not only between the windows of one run)."""
    levels = {n: [*a.levels.get(n, []), *b.levels.get(n, [])] for n in {*a.levels, *b.levels}}
    return SideResult(
        label=a.label,
        idle=[*a.idle, *b.idle],
        levels=dict(sorted(levels.items())),
        ttft_ms={n: [*a.ttft_ms.get(n, []), *b.ttft_ms.get(n, [])] for n in levels},
        errors={n: a.errors.get(n, 0) + b.errors.get(n, 0) for n in levels},
    )


# ---------------------------------------------------------------------------- report


def summarise(side: SideResult) -> dict:
    out: dict = {"label": side.label, "levels": {}}
    idle = mean_cpu_percent(side.idle)
    if idle:
        out["idle_cpu_percent"] = {**idle, "total": total(idle)}
        out["idle_cpu_percent_total_by_round"] = [total(mean_cpu_percent([w])) for w in side.idle]
    for n, windows in side.levels.items():
        cpu = [w.cpu_ms_per_turn() for w in windows]
        above = [w.cpu_ms_per_turn_above(idle) for w in windows]
        records = [w.records_per_turn() for w in windows]
        out["levels"][n] = {
            "turns": sum(w.turns for w in windows),
            "errors": side.errors[n],
            "turns_per_s": Spread.of([w.turns / w.seconds for w in windows]).as_dict(),
            "cpu_ms_per_turn": {k: s.as_dict() for k, s in spread_by_key(cpu).items()},
            "cpu_ms_per_turn_total": Spread.of([total(c) for c in cpu]).as_dict(),
            "cpu_ms_per_turn_above_idle": {k: s.as_dict() for k, s in spread_by_key(above).items()},
            "cpu_ms_per_turn_above_idle_total": Spread.of([total(a) for a in above]).as_dict(),
            "records_per_turn": {k: s.as_dict() for k, s in spread_by_key(records).items()},
            "records_per_turn_total": Spread.of([total(r) for r in records]).as_dict(),
            "bytes_per_turn": {
                k: s.as_dict()
                for k, s in spread_by_key([w.bytes_per_turn() for w in windows]).items()
            },
            "redis_calls_per_turn": {
                k: s.as_dict()
                for k, s in spread_by_key([w.redis_calls_per_turn() for w in windows]).items()
            },
            "redis_calls_per_turn_total": Spread.of(
                [total(w.redis_calls_per_turn()) for w in windows]
            ).as_dict(),
            "ttft_ms": {
                "p50": percentile(side.ttft_ms[n], 50),
                "p99": percentile(side.ttft_ms[n], 99),
            },
        }
    return out


def _fmt(s: dict) -> str:
    return f"{s['median']:7.2f} [{s['low']:.2f}..{s['high']:.2f}]"


def print_report(summaries: list[dict]) -> None:
    for summary in summaries:
        print(f"\n== {summary['label']}")
        idle = summary.get("idle_cpu_percent", {})
        if idle:
            parts = ", ".join(
                f"{k} {v:.1f}"
                for k, v in sorted(idle.items(), key=lambda kv: -kv[1])
                if k != "total"
            )
            print(f"idle: {idle['total']:.1f}% of a core ({parts})")
            rounds = summary.get("idle_cpu_percent_total_by_round", [])
            if len(rounds) > 1:
                print("  by round: " + ", ".join(f"{x:.1f}%" for x in rounds))
        for n, level in summary["levels"].items():
            print(
                f"\n{n} conversations: {level['turns']} turns ({level['errors']} errors), "
                f"TTFT p50 {level['ttft_ms']['p50']:.0f} ms, p99 {level['ttft_ms']['p99']:.0f} ms"
            )
            print(f"  {'CPU ms per turn':34} median [low..high]")
            rows = sorted(level["cpu_ms_per_turn"].items(), key=lambda kv: -kv[1]["median"])
            for name, s in rows:
                print(f"    {name:32} {_fmt(s)}")
            print(f"    {'total':32} {_fmt(level['cpu_ms_per_turn_total'])}")
            above = _fmt(level["cpu_ms_per_turn_above_idle_total"])
            print(f"    {'total above idle':32} {above}")
            print(f"  {'Kafka records per turn':34} (bytes per turn)")
            for topic, s in sorted(
                level["records_per_turn"].items(), key=lambda kv: -kv[1]["median"]
            ):
                b = level["bytes_per_turn"].get(topic, {"median": 0})["median"]
                print(f"    {topic:32} {_fmt(s)}  ({b:,.0f} B)")
            print(f"    {'total':32} {_fmt(level['records_per_turn_total'])}")
            calls = ", ".join(
                f"{k} {v['median']:.1f}"
                for k, v in sorted(
                    level["redis_calls_per_turn"].items(), key=lambda kv: -kv[1]["median"]
                )
            )
            redis_total = level["redis_calls_per_turn_total"]["median"]
            print(f"  Redis commands per turn: {redis_total:.1f} ({calls})")


def plot(summaries: list[dict], title: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    bars: list[tuple[str, dict]] = [
        (f"{s['label'].split(' (')[0]}\n{n} conv", lvl)
        for s in summaries
        for n, lvl in s["levels"].items()
    ]
    for ax, key, unit in (
        (axes[0], "cpu_ms_per_turn", "CPU ms per turn"),
        (axes[1], "records_per_turn", "Kafka records per turn"),
    ):
        names = sorted({k for _, lvl in bars for k in lvl[key]})
        bottoms = [0.0] * len(bars)
        cmap = plt.get_cmap("tab20")
        for i, name in enumerate(names):
            heights = [lvl[key].get(name, {"median": 0})["median"] for _, lvl in bars]
            ax.bar(range(len(bars)), heights, bottom=bottoms, label=name, color=cmap(i % 20))
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        totals = [lvl[f"{key}_total"] for _, lvl in bars]
        ax.errorbar(
            range(len(bars)),
            [t["median"] for t in totals],
            yerr=[
                [t["median"] - t["low"] for t in totals],
                [t["high"] - t["median"] for t in totals],
            ],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        ax.set_xticks(range(len(bars)), [b for b, _ in bars], fontsize=7)
        ax.set_ylabel(unit)
        ax.legend(fontsize=6, ncol=2)
    idle = [s.get("idle_cpu_percent", {}).get("total", 0) for s in summaries]
    axes[2].bar([s["label"].split(" (")[0] for s in summaries], idle, color="gray")
    axes[2].set_ylabel("idle stack, % of one core")
    fig.suptitle(title)
    fig.tight_layout()
    path = save_figure(fig, "cost")
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- main


@contextlib.contextmanager
def baseline_tree(ref: str):
    """A detached worktree of `ref` beside this one (removed afterwards)."""
    sha = git("rev-parse", "--short", ref)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"turnstream-baseline-{sha}"
    if path.exists():
        shutil.rmtree(path)
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(path), sha], cwd=REPO, check=True
    )
    try:
        build_artefacts(path)
        yield sha, path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, check=False)


# where the role list lives: runtime/processes.py now, infra/stack.py in older trees
LIST_ROLES = """
try:
    from runtime.processes import ROLES
except ImportError:
    from infra.stack import ROLES
print(*(r.log for r in ROLES))
"""


def tree_roles(tree: Path) -> tuple[str, ...]:
    """The roles the local stack of `tree` starts (a commit may have fewer than this one,
    e.g. before the audit worker was a role), by their log names."""
    if tree == REPO:
        return ()  # every role of this tree
    listed = subprocess.run(
        [sys.executable, "-c", LIST_ROLES],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return tuple(listed.stdout.split())


def build_artefacts(tree: Path) -> None:
    """What setup builds and git does not keep, for a checked-out commit: the safety
    category model. Ours is copied, then trained again only where the commit's data or
    settings differ (`--if-stale`), with the embeddings cached under TURNSTREAM_HOME."""
    ours = REPO / "moderation/categories/model"
    theirs = tree / "moderation/categories/model"
    if ours.is_dir() and not theirs.exists():
        shutil.copytree(ours, theirs)
    train = tree / "moderation/categories/train.py"
    if not train.exists():  # a commit from before the classifier
        return
    cache = Path(Settings.from_env().state_dir) / "cache" / "category-embeddings"
    print(f"[baseline] category model: {tree.name} (trained only if stale)", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "moderation.categories.train", "--if-stale"]
        + (["--cache", str(cache)] if "--cache" in train.read_text() else []),
        cwd=tree,
        check=True,
    )


def git(*args: str) -> str:
    """A git command's output in this repository, stripped (raises when git fails)."""
    done = subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def this_tree_label(env: list[str]) -> str:
    """`this tree (<sha>)`, with `+changes` when tracked files differ from the commit, and
    the settings `--env` gave it."""
    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"this tree ({head}{'+changes' if dirty else ''})" + "".join(f" {e}" for e in env)


def side_env(pairs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` pairs (`--env`) as an environment; only TURNSTREAM_ settings."""
    env = dict(pair.split("=", 1) for pair in pairs)
    wrong = [name for name in env if not name.startswith("TURNSTREAM_")]
    if wrong:
        raise SystemExit(f"--env takes TURNSTREAM_ settings only, not {wrong}")
    return env


async def main_async(args: argparse.Namespace) -> None:
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO
    )
    side_env(args.env)  # refused before anything starts
    trees = [(this_tree_label(args.env), REPO)]
    with contextlib.ExitStack() as exits:
        if args.baseline:
            sha, path = exits.enter_context(baseline_tree(args.baseline))
            trees.insert(0, (f"baseline {sha}", path))
        sides: dict[str, SideResult] = {}
        for r in range(args.rounds):
            # alternate the order: neither side always gets the fresher (or warmer) machine
            for label, tree in trees if r % 2 == 0 else trees[::-1]:
                if args.rounds > 1:
                    print(f"round {r + 1}/{args.rounds}: {label}", file=sys.stderr)
                measured = await measure_side(label, tree, args)
                sides[label] = merge(sides[label], measured) if label in sides else measured
    summaries = [summarise(sides[label]) for label, _ in trees]
    print_report(summaries)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"cost-{args.engine}"
    meta = {
        "command": " ".join(["python -m bench.cost", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "engine": args.engine,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "token_interval_ms": args.token_interval_ms,
        "cores": psutil.cpu_count(),
    }
    stem.with_suffix(".json").write_text(json.dumps({**meta, "sides": summaries}, indent=2))
    figure = plot(summaries, f"cost per turn, {args.engine} engine ({meta['date']})")
    print(f"\nwrote {stem}.json" + (f" and {figure}" if figure else ""))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=["fake", "vllm", "transformers"], default="fake")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of one window")
    parser.add_argument("--repeats", type=int, default=3, help="windows per level (spread)")
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    parser.add_argument("--baseline", default="", help="a git ref measured in the same run")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="TURNSTREAM_NAME=VALUE",
        help="a setting for this tree's roles only (repeatable): with --baseline HEAD, a "
        "setting's A/B in one run",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each side this many times, alternating which goes first; the windows "
        "of all rounds are pooled (one run's noise is ~10 points of idle: docs/cost.md)",
    )
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
