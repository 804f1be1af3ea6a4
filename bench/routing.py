"""What routing by prefix cache and load buys: TTFT under a prefix-heavy chat workload, per
endpoint-picking strategy (`stream_jobs.assembly.routing.endpoint_picker`).

The pipeline runs in its own namespace per strategy: edge, preprocess and `--workers`
inference workers in-process (one consumer group: Kafka splits the pool's partitions), the
assembly job as a child process picking the worker. Each worker has its own fake engine
that simulates a GPU's costs (`FakeEngine`): prefill at `--prefill-ms` per prompt token not
in its prefix cache, one prefill at a time; an LRU prefix cache of `--cache-tokens`
(a few conversations' prompts); `--max-num-seqs` streams at once, the rest wait.

The workload (seeded: the same for every strategy): `--clients` concurrent WebSocket clients
each work through their share of `--conversations` multi-turn conversations (a pasted
document of 1500-3000 tokens, then `--turns - 1` short follow-ups, whose prompts the
assembly job builds from the whole history) and `--one-shots` short single questions,
shuffled, with think time between turns. TTFT is taken at the client, from `turn.create` to
the first `response.delta`. The safety checks, the semantic router's classifier and the
answer cache are off: every turn reaches an engine, and the CPUs go to the pipeline.

    python -m bench.routing      # router, round_robin, random, key_hash (~4.5 min, 2 cores)
    python -m bench.routing --conversations 24 --turns 6 --workers 3

`--engine vllm`: real vLLM engines on the bundled SmolLM2-135M instead (each bound to its
own core, a KV cache of `--kv-mb`), and the strategies `router` (workers follow their
engine's KV events: the exact blocks held), `router_approx` (the same picker on its
approximate index alone: `TURNSTREAM_KV_EVENTS=false`) and `key_hash`. Cached prompt tokens
come from the engines' usage on each answer (`cached`, `prefilled` in the table).

    python -m bench.routing --engine vllm --clients 4 --conversations 8 --turns 4 \
        --one-shots 8 --doc-tokens 400,900 --max-tokens 32      # ~10 min

Prints a table (p99 ratio: the strategy's p99 TTFT over the router's, so > 1 means the
router is faster), writes bench/results/routing.json and bench/figures/routing.png
(`routing_vllm.*` with `--engine vllm`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import uvloop

from bench.namespace import drop_namespace
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.kafka import records_so_far
from harness.routed import RoutedPipeline, engines_on_own_cores, routed_pipeline
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import TurnCompleted
from schemas.topics import TURNS_COMPLETED
from workers.inference.engines.engine import Engine
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ResponseDelta, ResponseDone

STRATEGIES = ("router", "round_robin", "random", "key_hash")
# on real engines: the router on the engines' KV events, on its approximate index, key hashing
VLLM_STRATEGIES = ("router", "router_approx", "key_hash")
POOL = "chat"
TENANT = "bench"  # enterprise in the dev tenant registry: rate limits far above this load


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


# ---- the workload (pure, seeded) ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Turn:
    kind: str  # "document" (first turn of a conversation), "follow_up", "one_shot"
    text: str
    think_s: float  # pause before sending it


@dataclass(frozen=True, slots=True)
class Session:
    conversation_id: str
    turns: tuple[Turn, ...]


WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ri", "so", "ta") for b in range(60)]
QUESTIONS = (
    "What does the section about {w} say?",
    "Summarise the part on {w} in two sentences.",
    "Is {w} mentioned before or after the introduction?",
    "List the points the author makes about {w}.",
    "How does {w} relate to the conclusion?",
)


def document(rng: random.Random, tokens: int) -> str:
    """Pseudo-text of about `tokens` tokens (four characters a token)."""
    words: list[str] = []
    chars = 0
    while chars < tokens * 4:
        word = rng.choice(WORDS)
        words.append(word)
        chars += len(word) + 1
    return " ".join(words)


def workload(args: argparse.Namespace) -> list[list[Session]]:
    """Each client's sessions, in order: its conversations and one-shots, shuffled."""
    rng = random.Random(args.seed)
    sessions: list[Session] = []
    shared = [
        document(rng, rng.randint(args.doc_tokens[0], args.doc_tokens[1]))
        for _ in range(args.shared_docs)
    ]
    for c in range(args.conversations):
        if shared:  # one of a few documents, each conversation asking its own first question
            doc = shared[c % len(shared)]
            question = rng.choice(QUESTIONS).format(w=rng.choice(WORDS))
        else:
            doc = document(rng, rng.randint(args.doc_tokens[0], args.doc_tokens[1]))
            question = "what is this document about?"
        first = Turn("document", f"{doc}\n\nQuestion: {question}", 0.0)
        follow = [
            Turn("follow_up", rng.choice(QUESTIONS).format(w=rng.choice(WORDS)), think(rng, args))
            for _ in range(args.turns - 1)
        ]
        sessions.append(Session(f"conv-{c}", (first, *follow)))
    for o in range(args.one_shots):
        question = rng.choice(QUESTIONS).format(w=rng.choice(WORDS))
        sessions.append(Session(f"once-{o}", (Turn("one_shot", question, think(rng, args)),)))
    rng.shuffle(sessions)
    return [sessions[i :: args.clients] for i in range(args.clients)]


def think(rng: random.Random, args: argparse.Namespace) -> float:
    return rng.uniform(args.think_s[0], args.think_s[1])


# ---- driving it ------------------------------------------------------------------------------
@dataclass
class TurnResult:
    kind: str
    conversation_id: str
    turn_id: str = ""
    ttft_ms: float | None = None
    done_ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""
    sent_at: float = 0.0  # perf_counter when turn.create was sent


@dataclass
class Run:
    strategy: str
    turns: list[TurnResult] = field(default_factory=list)
    wall_s: float = 0.0
    started: float = 0.0
    queries: int = 0
    hits: int = 0
    routes: dict[str, dict] = field(default_factory=dict)  # turn id -> its route
    served_by: dict[str, str] = field(default_factory=dict)  # turn id -> worker


async def one_turn(
    client: EdgeClient, conversation_id: str, turn: Turn, max_tokens: int
) -> TurnResult:
    result = TurnResult(turn.kind, conversation_id)
    started = result.sent_at = time.perf_counter()
    try:
        result.turn_id = await client.start_turn(conversation_id, turn.text, max_tokens=max_tokens)
    except TurnRejected as err:
        result.error = err.error.code
        return result
    async for event in client.events(result.turn_id, wait_s=300):
        if isinstance(event, ResponseDelta) and result.ttft_ms is None:
            result.ttft_ms = (time.perf_counter() - started) * 1000
        elif isinstance(event, ResponseDone):
            result.done_ms = (time.perf_counter() - started) * 1000
            result.prompt_tokens = event.usage.prompt_tokens
            result.cached_tokens = event.usage.cached_prompt_tokens
            result.error = event.error.code if event.error is not None else ""
    return result


async def drive(running: RoutedPipeline, plan: list[list[Session]], args, run: Run) -> None:
    total = sum(len(s.turns) for sessions in plan for s in sessions)

    async def client_loop(index: int, sessions: list[Session]) -> None:
        await asyncio.sleep(index * args.stagger_s)
        async with EdgeClient.connect(running.url, running.token(f"user{index}")) as client:
            for session in sessions:
                for turn in session.turns:
                    await asyncio.sleep(turn.think_s)
                    run.turns.append(
                        await one_turn(client, session.conversation_id, turn, args.max_tokens)
                    )
                    if len(run.turns) % 20 == 0:
                        progress(f"{run.strategy}: {len(run.turns)}/{total} turns")

    run.started = time.perf_counter()
    await asyncio.gather(*(client_loop(i, s) for i, s in enumerate(plan)))
    run.wall_s = time.perf_counter() - run.started


async def warm_up(running: RoutedPipeline) -> None:
    """A few short turns: connections, consumer fetches and the assembly's tokenizer warm."""
    async with EdgeClient.connect(running.url, running.token("warm")) as client:
        for i in range(4):
            await client.ask(f"warm-{i}", "hello there", max_tokens=4)


def strategy_settings(strategy: str) -> tuple[str, bool]:
    """(the picker's strategy, whether workers follow their engine's KV events):
    `router_approx` is the router on its approximate prefix index alone."""
    if strategy == "router_approx":
        return "router", False
    return strategy, True


def build_engines(args: argparse.Namespace, kv_events: bool) -> list[Engine]:
    if args.engine == "vllm":
        from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

        options = VllmOptions(
            model_path=str(args.model_path),
            model_name="smollm2-135m",
            kv_cache_bytes=int(args.kv_mb * 1024 * 1024),
            max_model_len=args.model_len,
            max_num_seqs=args.max_num_seqs,
            kv_events=kv_events,
        )
        return list(engines_on_own_cores(lambda: VllmEngine(options), args.workers))
    return [
        FakeEngine(
            token_interval_s=args.token_ms / 1000,
            kv_capacity_tokens=args.kv_tokens,
            prefill_ms_per_token=args.prefill_ms,
            prefix_cache_tokens=args.cache_tokens,
            max_num_seqs=args.max_num_seqs,
        )
        for _ in range(args.workers)
    ]


async def run_strategy(strategy: str, args: argparse.Namespace) -> Run:
    picker, kv_events = strategy_settings(strategy)
    settings = Settings.from_env(
        namespace=f"bench-routing-{strategy.replace('_', '-')}-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        pools=POOL,
        routing_strategy=picker,
        safety_output_policy="off",  # not what is measured: keep the CPUs for the pipeline
        safety_screening=False,
        router_classifier=False,  # the semantic router's rules only (one pool here anyway)
        cache_enabled=False,  # every turn reaches an engine
        max_turn_chars=16_000,  # the pasted documents
        max_model_len=args.model_len if args.engine == "vllm" else 32_768,
        max_inflight_turns=args.capacity,
        max_num_seqs=args.max_num_seqs if args.engine == "vllm" else 0,
        model_path=str(args.model_path) if args.engine == "vllm" else "",
        kv_events=kv_events,
        log_level="WARNING",
    )
    progress(f"{strategy}: starting {args.workers} {args.engine} engines")
    engines = build_engines(args, kv_events)
    run = Run(strategy)
    plan = workload(args)
    started = time.perf_counter()
    try:
        async with routed_pipeline(settings, engines, tenant=TENANT) as running:
            await warm_up(running)
            progress(f"{strategy}: pipeline up in {time.perf_counter() - started:.0f} s")
            before = [e.snapshot() for e in engines]
            await drive(running, plan, args, run)
            grown = [e.snapshot().since(b) for e, b in zip(engines, before, strict=True)]
            run.queries = sum(g.prefix_cache_queries for g in grown)
            run.hits = sum(g.prefix_cache_hits for g in grown)
        await read_routes(settings, run)
    finally:
        for engine in engines:
            await engine.close()
        await drop_namespace(settings)
    progress(f"{strategy}: {len(run.turns)} turns in {run.wall_s:.1f} s")
    return run


async def read_routes(settings: Settings, run: Run) -> None:
    """Where each turn was sent and who answered (both on its `turn.completed`)."""
    ns, bootstrap = settings.namespace, settings.kafka_bootstrap
    for record in await records_so_far(bootstrap, TURNS_COMPLETED.full_name(ns), lambda r: True):
        event = decode(record.value)
        if not isinstance(event, TurnCompleted):
            continue
        run.served_by[event.turn_id] = event.worker_id
        if event.route is not None:
            route = event.route
            run.routes[event.turn_id] = {
                "worker": route.worker_id,
                "reason": route.pick_reason,
                "prefix_chars": route.prefix_chars,
                "prefix_tokens": route.prefix_tokens,
            }


# ---- reporting -------------------------------------------------------------------------------
def summary(run: Run) -> dict:
    ok = [t for t in run.turns if not t.error and t.ttft_ms is not None]
    ttft = [t.ttft_ms for t in ok]
    follow = [t for t in ok if t.kind == "follow_up"]
    # a follow-up re-sends its conversation: most of its prompt should come from the cache
    missed = [t for t in follow if t.cached_tokens < t.prompt_tokens / 2]
    return {
        "strategy": run.strategy,
        "turns": len(ok),
        "errors": len(run.turns) - len(ok),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "follow_up_p99_ms": percentile([t.ttft_ms for t in follow], 99),
        "turns_per_s": len(ok) / run.wall_s if run.wall_s else 0.0,
        "hit_ratio": run.hits / run.queries if run.queries else 0.0,
        # from the engines' usage on each answer: the prompt tokens read from the cache
        "cached_ratio": sum(t.cached_tokens for t in ok) / max(1, sum(t.prompt_tokens for t in ok)),
        "prefill_tokens": sum(t.prompt_tokens - t.cached_tokens for t in ok),
        "follow_up_misses": len(missed),
        "follow_ups": len(follow),
        **routing_facts(run),
        "ttft_ms": sorted(ttft),
        "per_turn": [per_turn(run, t) for t in run.turns],
    }


def per_turn(run: Run, t: TurnResult) -> dict:
    """One turn's record in the JSON (to see where the slow ones went, and why)."""
    route = run.routes.get(t.turn_id, {})
    return {
        **dataclasses.asdict(t),
        "sent_at": round(t.sent_at - run.started, 3),
        "served_by": run.served_by.get(t.turn_id, ""),
        "picked": route.get("worker", ""),
        "reason": route.get("reason", ""),
        "prefix_chars": route.get("prefix_chars", 0),
        "prefix_tokens": route.get("prefix_tokens", 0),
    }


def routing_facts(run: Run) -> dict:
    """How turns were placed: follow-ups served by the previous turn's worker, turns that
    landed on another worker than picked (the partition changed hands), pick reasons."""
    by_conversation: dict[str, list[TurnResult]] = {}
    for t in run.turns:
        if t.turn_id:
            by_conversation.setdefault(t.conversation_id, []).append(t)
    same = moves = 0
    for turns in by_conversation.values():
        workers = [run.served_by.get(t.turn_id, "") for t in turns]
        for previous, worker in itertools.pairwise(workers):
            same += previous == worker
            moves += previous != worker
    measured = {t.turn_id for t in run.turns if t.turn_id}  # not the warm-up turns
    routes = {turn_id: r for turn_id, r in run.routes.items() if turn_id in measured}
    elsewhere = sum(
        1
        for turn_id, route in routes.items()
        if route["worker"] and run.served_by.get(turn_id, route["worker"]) != route["worker"]
    )
    reasons = Counter(reason_kind(r["reason"]) for r in routes.values())
    share = Counter(w for turn_id, w in run.served_by.items() if turn_id in measured)
    return {
        "peak_live_conversations": peak_live(run),
        "sticky": same / (same + moves) if same + moves else 0.0,
        "served_elsewhere": elsewhere,
        "pick_reasons": dict(reasons),
        "served_per_worker": dict(sorted(share.items())),
    }


def reason_kind(reason: str) -> str:
    """A pick reason's kind: a prefix held by the engine (KV events), served lately (the
    approximate index), a new prefix placed by working set, or load alone."""
    if "KV events" in reason:
        return "held"
    if "chars served" in reason or reason.startswith("prefix"):
        return "served"
    return reason.split(",", maxsplit=1)[0].split(":", maxsplit=1)[0].split(" ", maxsplit=1)[0]


def peak_live(run: Run) -> dict[str, int]:
    """Per worker, the most conversations (first turn to last answer) at once whose turns it
    served: its prefix cache must hold them all, or follow-ups miss."""
    spans: dict[str, list[float]] = {}  # conversation -> [start, end, worker...]
    for t in run.turns:
        worker = run.served_by.get(t.turn_id, "")
        if t.kind == "one_shot" or not worker:
            continue
        start, end = t.sent_at - run.started, t.sent_at - run.started + t.done_ms / 1000
        span = spans.setdefault(t.conversation_id, [start, end])
        span[:2] = [min(span[0], start), max(span[1], end)]
        span.append(worker)
    events = sorted(
        (at, step, worker)
        for start, end, *workers in spans.values()
        for worker in set(workers)
        for at, step in ((start, 1), (end, -1))
    )
    live: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for _, step, worker in events:
        live[worker] += step
        peak[worker] = max(peak[worker], live[worker])
    return dict(sorted(peak.items()))


def print_table(rows: list[dict]) -> None:
    router = next((r for r in rows if r["strategy"] == "router"), None)
    router = router or next((r for r in rows if r["strategy"] == "router_approx"), None)
    print(
        f"\n{'strategy':>12} {'turns':>5} {'err':>4} {'TTFT p50':>9} {'p99':>8} "
        f"{'p99/router':>10} {'follow p99':>10} {'turns/s':>8} {'hit ratio':>9} "
        f"{'f-up miss':>9} {'sticky':>6} {'cached':>6} {'prefilled':>9}"
    )
    for r in rows:
        ratio = r["ttft_p99_ms"] / router["ttft_p99_ms"] if router else float("nan")
        r["p99_vs_router"] = ratio
        print(
            f"{r['strategy']:>12} {r['turns']:>5} {r['errors']:>4} {r['ttft_p50_ms']:>7.0f}ms "
            f"{r['ttft_p99_ms']:>6.0f}ms {ratio:>10.2f} {r['follow_up_p99_ms']:>8.0f}ms "
            f"{r['turns_per_s']:>8.2f} {r['hit_ratio']:>9.2f} "
            f"{r['follow_up_misses']:>4}/{r['follow_ups']:<4} {r['sticky']:>6.2f} "
            f"{r['cached_ratio']:>6.0%} {r['prefill_tokens']:>9}"
        )
    print(
        "\nplacement: turns served per worker; most live conversations per worker at once; "
        "picks by reason; turns served by another worker than picked"
    )
    for r in rows:
        print(
            f"{r['strategy']:>12} {r['served_per_worker']} {r['peak_live_conversations']} "
            f"{r['pick_reasons']} elsewhere={r['served_elsewhere']}"
        )


def plot(rows: list[dict], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        values = r["ttft_ms"]
        ys = [i / len(values) for i in range(1, len(values) + 1)]
        left.plot(values, ys, label=f"{r['strategy']} (hits {r['hit_ratio']:.0%})")
    left.set_xscale("log")
    left.set_xlabel("TTFT at the client (ms, log)")
    left.set_ylabel("fraction of turns")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    names = [r["strategy"] for r in rows]
    xs = range(len(rows))
    right.bar([x - 0.2 for x in xs], [r["ttft_p50_ms"] for r in rows], 0.4, label="p50")
    right.bar([x + 0.2 for x in xs], [r["ttft_p99_ms"] for r in rows], 0.4, label="p99")
    right.set_xticks(list(xs), names)
    right.set_ylabel("TTFT (ms)")
    right.legend()
    engine = (
        f"real vLLM (SmolLM2-135M, CPU), KV {args.kv_mb:g} MiB each"
        if args.engine == "vllm"
        else f"fake engines: prefill {args.prefill_ms:g} ms/token, cache {args.cache_tokens} tokens"
    )
    shared = f" on {args.shared_docs} shared documents" if args.shared_docs else ""
    fig.suptitle(
        f"{args.workers} workers, {args.conversations} conversations{shared} x {args.turns} "
        f"turns + {args.one_shots} one-shots, {args.clients} clients; {engine}, "
        f"{args.max_num_seqs} seqs",
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, figure_name(args))


def figure_name(args: argparse.Namespace) -> str:
    """routing (fake engines), routing_vllm, routing_vllm_shared (shared documents)."""
    if args.engine == "fake":
        return "routing"
    return "routing_vllm_shared" if args.shared_docs else "routing_vllm"


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    rows = []
    for strategy in args.strategies:
        print(f"[{strategy}]", file=sys.stderr, flush=True)
        rows.append(summary(await run_strategy(strategy, args)))
    print_table(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = figure_name(args)
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=1))
    plot(rows, args)
    print(f"\nwrote bench/results/{name}.json and bench/figures/{name}.png")
    print(f"total {time.perf_counter() - started:.0f} s")


def pair(kind: type):
    def parse(text: str) -> tuple:
        low, high = (kind(x) for x in text.split(","))
        return low, high

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.routing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--strategies", type=lambda s: s.split(","), default=None)
    parser.add_argument(
        "--engine",
        choices=("fake", "vllm"),
        default="fake",
        help="vllm: real vLLM engines on the bundled SmolLM2 (CPU), KV events followed",
    )
    parser.add_argument("--kv-mb", type=float, default=160, help="vllm: KV cache per engine")
    parser.add_argument("--model-len", type=int, default=3072, help="vllm: max_model_len")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6, help="per conversation")
    parser.add_argument("--one-shots", type=int, default=24)
    parser.add_argument("--doc-tokens", type=pair(int), default=(1500, 3000))
    parser.add_argument(
        "--shared-docs",
        type=int,
        default=0,
        help="conversations open on one of this many documents (0: each its own)",
    )
    parser.add_argument("--think-s", type=pair(float), default=(0.5, 1.5))
    parser.add_argument("--stagger-s", type=float, default=0.5, help="between clients' starts")
    parser.add_argument("--max-tokens", type=int, default=24, help="answer length")
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--prefill-ms", type=float, default=0.5, help="per uncached token")
    parser.add_argument("--cache-tokens", type=int, default=12_000, help="prefix cache")
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--kv-tokens", type=int, default=32_768)
    parser.add_argument("--capacity", type=int, default=16, help="turns a worker holds")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.strategies is None:
        args.strategies = list(VLLM_STRATEGIES if args.engine == "vllm" else STRATEGIES)
    if args.engine == "vllm":
        from runtime.smollm2 import default_model_dir

        args.model_path = default_model_dir(Settings.from_env())
    else:
        args.model_path = ""
    uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
