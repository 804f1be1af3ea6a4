"""What the pipeline adds to latency: the engine called in-process vs the same engine behind
edge → Kafka → worker → Redis → edge, measured at the WebSocket client.

For each concurrency level, N conversations each run `rounds` turns back to back; the
baseline runs the same requests on the same engine in-process. `--arrivals staggered`
(default) starts each conversation at a random point within `--stagger-s`, so N streams
are in flight at any moment (steady state); `--arrivals burst` starts all N turns at the
same instant every round (a thundering herd, the worst case). TTFT is measured from
sending the turn to its first text; inter-token latency (ITL) as gaps between text chunks.
With `--engine fake` tokens come at a fixed rate, so the difference is the pipeline alone;
with `--engine vllm` the real engine (bundled SmolLM2) runs both sides.

    python -m bench.pipeline_latency --engine fake --concurrency 1,16,128
    python -m bench.pipeline_latency --engine vllm --concurrency 1,16,128

`--doors` compares the edge's two doors instead, on one stack in one run: the WebSocket
protocol (the baseline) and the OpenAI-compatible HTTP door's Server-Sent Events (an aiohttp
client reading the SSE stream; TTFT to the first content chunk). The levels alternate which
door goes first:

    python -m bench.pipeline_latency --doors --concurrency 1,16,128

`--tracing` measures what OpenTelemetry tracing costs instead: the same pipeline with
tracing off (TURNSTREAM_OTEL_EXPORTER=none, the baseline) and on (every role exports every
span over OTLP/HTTP, batched, to a receiver in this process that counts and drops them):

    python -m bench.pipeline_latency --tracing --concurrency 1,16 --rounds 3

Prints p50/p99 and the ratio, writes JSON and a plot under bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from bench.namespace import drop_namespace
from bench.stats import Comparison, compare, percentile
from harness.tracing import OtlpReceiver, in_memory_tracing
from infra.stack import REPO
from runtime.kafka_topics import ensure_topics
from runtime.processes import ROLES, Child, free_port, start_roles, stop_roles
from runtime.settings import Settings
from runtime.tracing.propagation import from_kafka_headers
from runtime.tracing.spans import consuming, producing
from schemas.events import DecodingParams, Message, Role
from workers.inference.app import build_engine
from workers.inference.engines.engine import Engine, GenerationRequest
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

RESULTS = REPO / "bench" / "results"
# The fake engine echoes the prompt (a word a token): 26 words, ~32-token answers. Plain
# words, so the safety classifier reads them once, as it reads most real text (digits inside
# words, "w1", look like leetspeak and get a second, de-obfuscated reading).
FAKE_TEXT = (
    "Tell me what a good day of walking in the hills looks like, with the weather, the "
    "food we carry and the view from the top."
)
VLLM_TEXT = "Write a short story about a robot who learns to paint."


@dataclass
class Samples:
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    # pipeline only, per hop: client send → turn.accepted (edge claim + Kafka ack),
    # edge accept → worker start (Kafka delivery + worker prep), edge accept → first token
    accept_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    server_ttft_ms: list[float] = field(default_factory=list)
    turns: int = 0
    wall_s: float = 0.0


def pooled(a: Samples, b: Samples) -> Samples:
    """Two runs' samples as one (their wall times added)."""
    return Samples(
        ttft_ms=a.ttft_ms + b.ttft_ms,
        itl_ms=a.itl_ms + b.itl_ms,
        accept_ms=a.accept_ms + b.accept_ms,
        queue_ms=a.queue_ms + b.queue_ms,
        server_ttft_ms=a.server_ttft_ms + b.server_ttft_ms,
        turns=a.turns + b.turns,
        wall_s=a.wall_s + b.wall_s,
    )


class _StreamClock:
    """Times one answer's text chunks: the first as TTFT (from the request), the rest as
    inter-token gaps. Both sides of the comparison measure through this one piece."""

    def __init__(self, samples: Samples) -> None:
        self._samples = samples
        self._start = self._last = time.perf_counter()
        self._first = True

    def since_start_ms(self) -> float:
        return (time.perf_counter() - self._start) * 1000

    def tick(self) -> None:
        now = time.perf_counter()
        if self._first:
            self._samples.ttft_ms.append((now - self._start) * 1000)
        else:
            self._samples.itl_ms.append((now - self._last) * 1000)
        self._first, self._last = False, now


async def run_direct(
    engine: Engine,
    concurrency: int,
    rounds: int,
    *,
    text: str,
    decoding: DecodingParams,
    stagger_s: float,
) -> Samples:
    samples = Samples()

    async def conversation() -> None:
        await asyncio.sleep(random.uniform(0, stagger_s))
        for _ in range(rounds):
            request = GenerationRequest(uuid.uuid4().hex, [Message(Role.USER, text)], decoding)
            clock = _StreamClock(samples)
            async for delta in engine.stream(request):
                if delta.text:
                    clock.tick()
            samples.turns += 1

    started = time.perf_counter()
    await asyncio.gather(*(conversation() for _ in range(concurrency)))
    samples.wall_s = time.perf_counter() - started
    return samples


async def run_http(
    base_url: str,
    token: str,
    concurrency: int,
    rounds: int,
    *,
    text: str,
    decoding: DecodingParams,
    stagger_s: float,
) -> Samples:
    """The same turns through the HTTP door: POST /v1/chat/completions, stream: true, one
    aiohttp session (a connection per stream, as the WebSocket side has)."""
    import aiohttp

    samples = Samples()
    headers = {"Authorization": f"Bearer {token}"}
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "max_tokens": decoding.max_tokens,
        "temperature": decoding.temperature,
    }

    async def conversation(http: aiohttp.ClientSession) -> None:
        await asyncio.sleep(random.uniform(0, stagger_s))
        for _ in range(rounds):
            clock = _StreamClock(samples)
            url = f"{base_url}/v1/chat/completions"
            async with http.post(url, json=body, headers=headers) as response:
                response.raise_for_status()
                samples.accept_ms.append(clock.since_start_ms())  # headers: at the Kafka ack
                async for line in response.content:
                    if not line.startswith(b"data: "):
                        continue
                    if line.startswith(b"data: [DONE]"):
                        samples.turns += 1
                        break
                    if b'"content":"' in line and b'"content":""' not in line:
                        clock.tick()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(*(conversation(http) for _ in range(concurrency)))
        samples.wall_s = time.perf_counter() - started
    return samples


async def run_pipeline(
    url: str,
    token: str,
    concurrency: int,
    rounds: int,
    *,
    text: str,
    decoding: DecodingParams,
    stagger_s: float,
) -> Samples:
    samples = Samples()

    async def conversation(client: EdgeClient) -> None:
        await asyncio.sleep(random.uniform(0, stagger_s))
        for _ in range(rounds):
            clock = _StreamClock(samples)
            turn_id = await client.start_turn(
                f"bench-{uuid.uuid4().hex[:12]}",
                text,
                max_tokens=decoding.max_tokens,
                temperature=decoding.temperature,
            )
            samples.accept_ms.append(clock.since_start_ms())
            async for event in client.events(turn_id, wait_s=600):
                if isinstance(event, ResponseDelta):
                    clock.tick()
                elif isinstance(event, ResponseDone):
                    samples.turns += 1
                    samples.queue_ms.append(event.timings.queue_ms)
                    if event.timings.ttft_ms is not None:
                        samples.server_ttft_ms.append(event.timings.ttft_ms)

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(EdgeClient.connect(url, token))
            for _ in range(concurrency)
        ]
        started = time.perf_counter()
        await asyncio.gather(*(conversation(c) for c in clients))
        samples.wall_s = time.perf_counter() - started
    return samples


def start_pipeline(
    settings: Settings,
    engine: str,
    logs: Path,
    *,
    otlp_endpoint: str = "",
    roles: tuple[str, ...] = (),
    cwd: Path = REPO,
    extra_env: Mapping[str, str] | None = None,
) -> list[Child]:
    """Every role (or those named in `roles`) as a child process; `otlp_endpoint`: with
    tracing on, exporting there; `cwd`: the source tree they run from; `extra_env`: settings
    of this run only (a setting's A/B)."""
    tracing = {
        "TURNSTREAM_OTEL_EXPORTER": "otlp-http" if otlp_endpoint else "none",
        "TURNSTREAM_OTEL_ENDPOINT": otlp_endpoint,
    }
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TURNSTREAM_ENGINE": engine,
        "TURNSTREAM_NAMESPACE": settings.namespace,
        "TURNSTREAM_EDGE_PORT": str(settings.edge_port),
        "TURNSTREAM_EDGE_HTTP_PORT": str(settings.edge_http_port),
        "TURNSTREAM_FAKE_TOKEN_INTERVAL_MS": str(settings.fake_token_interval_ms),
        "TURNSTREAM_MAX_INFLIGHT_TURNS": str(settings.max_inflight_turns),
        "TURNSTREAM_LOG_LEVEL": "WARNING",
        **tracing,
        **(extra_env or {}),
    }
    return start_roles(env, logs, log_prefix="bench-", only=roles, cwd=cwd)


def report(
    engine: str,
    results: dict[int, dict[str, Samples]],
    labels: tuple[str, str] = ("direct", "pipeline"),
) -> list[Comparison]:
    rows: list[Comparison] = []
    print(f"\n{engine} engine: added latency at the client (ms)")
    header = (
        f"{'streams':>7} {'metric':>5} {'q':>4} {labels[0]:>9} {labels[1]:>9} "
        f"{'added':>8} {'ratio':>6}"
    )
    print(header)
    for n, pair in results.items():
        for metric in ("ttft", "itl"):
            d = getattr(pair["direct"], f"{metric}_ms")
            p = getattr(pair["pipeline"], f"{metric}_ms")
            for c in compare(metric, d, p):
                rows.append(c)
                print(
                    f"{n:>7} {metric:>5} p{c.q:<3.0f} {c.direct_ms:9.2f} {c.pipeline_ms:9.2f} "
                    f"{c.added_ms:8.2f} {c.ratio:6.2f}"
                )
    sides = ["pipeline"] if labels[0] in ("direct", "off") else ["direct", "pipeline"]
    names = dict(zip(("direct", "pipeline"), labels, strict=True))
    print("\nwhere TTFT goes (ms, p50 / p99)")
    print(f"{'streams':>7} {'side':>10} {'accepted':>15} {'queued':>15} {'worker ttft':>15}")
    for n, pair in results.items():
        for side in sides:
            p = pair[side]
            cells = [
                f"{percentile(v, 50):6.1f} / {percentile(v, 99):6.1f}"
                for v in (p.accept_ms, p.queue_ms, p.server_ttft_ms)
            ]
            print(f"{n:>7} {names[side]:>10} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15}")
    return rows


def plot(
    engine: str,
    results: dict[int, dict[str, Samples]],
    out: Path,
    labels: tuple[str, str] = ("direct", "pipeline"),
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric in zip(axes, ("ttft", "itl"), strict=True):
        for n, pair in results.items():
            for side, label, style in (
                ("direct", labels[0], "--"),
                ("pipeline", labels[1], "-"),
            ):
                values = sorted(getattr(pair[side], f"{metric}_ms"))
                if not values:
                    continue
                ys = [i / len(values) for i in range(1, len(values) + 1)]
                ax.plot(values, ys, style, label=f"{label}, {n} streams")
        ax.set_xscale("log")
        ax.set_xlabel(f"{metric.upper()} (ms, log)")
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    title = (
        "turnstream pipeline vs in-process engine"
        if labels[0] == "direct"
        else (f"turnstream pipeline: {labels[1]} vs {labels[0]}")
    )
    fig.suptitle(f"{title} ({engine})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def hop_cost_us(records: int = 5000) -> dict[str, float]:
    """CPU per hop for tracing, in this process: continue a record's context, handle it in
    a `process` span, produce one record under a `send` span (the consumer loop's and the
    producer's work per record): tracing off (no context: the default), off passing a
    caller's context through, and on (in-memory exporter)."""
    traced = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]

    def hops(incoming: list[tuple[str, bytes]]) -> float:
        started = time.perf_counter()
        for i in range(records):
            with (
                consuming("t.in", parent=from_kafka_headers(incoming), turn_id="t", offset=i),
                producing("t.out", turn_id="t"),
            ):
                pass
        return (time.perf_counter() - started) / records * 1e6

    off, passed = hops([]), hops(traced)
    with in_memory_tracing() as exporter:
        on = hops(traced)
        exporter.clear()
    return {"off_us": off, "passthrough_us": passed, "on_us": on}


async def measure_pipeline(
    settings: Settings,
    args: argparse.Namespace,
    *,
    levels: list[int],
    text: str,
    decoding: DecodingParams,
    stagger: float,
    logs: Path,
    otlp_endpoint: str = "",
) -> dict[int, Samples]:
    """Start every role, run each concurrency level through the edge, stop the roles."""
    measured: dict[int, Samples] = {}
    # Tracing runs start the roles twice: without the sink (off the latency path), which
    # would have to take the embedded ClickHouse from whoever else holds it meanwhile.
    roles = tuple(r.log for r in ROLES if r.log != "sink") if args.tracing else ()
    children = start_pipeline(settings, args.engine, logs, otlp_endpoint=otlp_endpoint, roles=roles)
    try:
        url = f"ws://127.0.0.1:{settings.edge_port}/"
        token = mint_token(settings.auth_secret, "bench", "bench")
        # warm-up: consumer group join, connections, caches
        await run_pipeline(url, token, 2, 1, text=text, decoding=decoding, stagger_s=0)
        for n in levels:
            measured[n] = await run_pipeline(
                url, token, n, args.rounds, text=text, decoding=decoding, stagger_s=stagger
            )
            print(
                f"  {n:>4} streams: {measured[n].turns} turns in {measured[n].wall_s:.1f} s",
                file=sys.stderr,
            )
    finally:
        await asyncio.to_thread(stop_roles, children)
    return measured


async def measure_doors(
    settings: Settings,
    args: argparse.Namespace,
    *,
    levels: list[int],
    text: str,
    decoding: DecodingParams,
    stagger: float,
    logs: Path,
) -> dict[int, dict[str, Samples]]:
    """Both doors on one stack: each level through the WebSocket ("direct", the baseline)
    and the HTTP door ("pipeline") in A B B A order, each half the rounds, pooled per door:
    whichever door runs first after a level change pays for the change (measured: its p99
    was the worse one whichever door it was), so each door goes first once."""
    children = start_pipeline(settings, args.engine, logs)
    measured: dict[int, dict[str, Samples]] = {}
    try:
        url = f"ws://127.0.0.1:{settings.edge_port}/"
        http = f"http://127.0.0.1:{settings.edge_http_port}"
        token = mint_token(settings.auth_secret, "bench", "bench")
        options = {"text": text, "decoding": decoding}
        await run_pipeline(url, token, 2, 1, stagger_s=0, **options)  # warm-up, both doors
        await run_http(http, token, 2, 1, stagger_s=0, **options)
        half = max(args.rounds // 2, 1)
        for n in levels:
            measured[n] = {"direct": Samples(), "pipeline": Samples()}
            for side in ("direct", "pipeline", "pipeline", "direct"):
                run = run_pipeline if side == "direct" else run_http
                where = url if side == "direct" else http
                part = await run(where, token, n, half, stagger_s=stagger, **options)
                measured[n][side] = pooled(measured[n][side], part)
                label = "websocket" if side == "direct" else "http/sse"
                print(
                    f"  {n:>4} streams, {label}: {part.turns} turns in {part.wall_s:.1f} s",
                    file=sys.stderr,
                )
    finally:
        await asyncio.to_thread(stop_roles, children)
    return measured


def stack_settings(
    prefix: str, engine: str, token_interval_ms: float, most_conversations: int
) -> Settings:
    """Settings of a benchmark's own stack: a fresh namespace, a free edge port, the engine
    asked for, and room for every conversation's turn in flight (twice over)."""
    return Settings.from_env(
        namespace=f"{prefix}-{uuid.uuid4().hex[:6]}",
        edge_port=free_port(),
        edge_http_port=free_port(),
        engine=engine,
        fake_token_interval_ms=token_interval_ms,
        max_inflight_turns=most_conversations * 2,
    )


async def main_async(args: argparse.Namespace) -> None:
    levels = [int(x) for x in args.concurrency.split(",")]
    settings = stack_settings("bench", args.engine, args.token_interval_ms, max(levels))
    try:
        await measure_and_report(args, levels, settings)
    finally:  # its topics and keys would pile up in the developer's broker and Redis
        await drop_namespace(settings)


async def measure_and_report(
    args: argparse.Namespace, levels: list[int], settings: Settings
) -> None:
    base = Settings.from_env()
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    text = FAKE_TEXT if args.engine == "fake" else VLLM_TEXT
    decoding = DecodingParams(max_tokens=args.max_tokens, temperature=0.0)
    results: dict[int, dict[str, Samples]] = {n: {} for n in levels}
    stagger = 0.0 if args.arrivals == "burst" else args.stagger_s
    random.seed(0)

    logs = base.state_path / "logs"

    async def pipeline_side(side: str, otlp_endpoint: str = "") -> None:
        print(f"[{side}] edge → Kafka → worker → Redis → edge", file=sys.stderr)
        measured = await measure_pipeline(
            settings,
            args,
            levels=levels,
            text=text,
            decoding=decoding,
            stagger=stagger,
            logs=logs,
            otlp_endpoint=otlp_endpoint,
        )
        for n in levels:
            results[n][side] = measured[n]

    spans_per_turn, hop = None, None
    if args.doors:
        labels = ("websocket", "http")
        print("[doors] WebSocket vs HTTP/SSE, one stack", file=sys.stderr)
        both = await measure_doors(
            settings, args, levels=levels, text=text, decoding=decoding, stagger=stagger, logs=logs
        )
        for n in levels:
            results[n] = both[n]
    elif args.tracing:  # the same pipeline, tracing off (baseline) then on
        labels = ("off", "traced")
        await pipeline_side("direct")
        async with OtlpReceiver.running() as receiver:
            await pipeline_side("pipeline", otlp_endpoint=receiver.endpoint)
            turns = sum(results[n]["pipeline"].turns for n in levels) + 2  # + warm-up
            spans_per_turn = len(receiver.spans) / turns  # the roles flushed as they stopped
        print(f"  {len(receiver.spans)} spans received, {spans_per_turn:.1f} per turn")
        hop = hop_cost_us()
        print(
            f"  tracing CPU per hop (consume + produce one record): off {hop['off_us']:.1f} µs, "
            f"off passing a context on {hop['passthrough_us']:.1f} µs, "
            f"traced {hop['on_us']:.1f} µs"
        )
    else:
        labels = ("direct", "pipeline")
        print(f"[direct] {args.engine} engine in-process", file=sys.stderr)
        engine = build_engine(settings)
        await run_direct(engine, 2, 1, text=text, decoding=decoding, stagger_s=0)  # warm-up
        for n in levels:
            results[n]["direct"] = await run_direct(
                engine, n, args.rounds, text=text, decoding=decoding, stagger_s=stagger
            )
            print(
                f"  {n:>4} streams: {results[n]['direct'].turns} turns "
                f"in {results[n]['direct'].wall_s:.1f} s",
                file=sys.stderr,
            )
        await engine.close()
        del engine
        await pipeline_side("pipeline")

    rows = report(f"{args.engine}, {args.arrivals} arrivals", results, labels)
    RESULTS.mkdir(parents=True, exist_ok=True)
    tracing = "-tracing" if args.tracing else "-doors" if args.doors else ""
    stem = RESULTS / f"pipeline-latency-{args.engine}-{args.arrivals}{tracing}"
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "engine": args.engine,
                "labels": {"direct_ms": labels[0], "pipeline_ms": labels[1]},
                "spans_per_turn": spans_per_turn,
                "hop_cpu_us": hop,
                "arrivals": args.arrivals,
                "rounds": args.rounds,
                "max_tokens": args.max_tokens,
                "token_interval_ms": args.token_interval_ms if args.engine == "fake" else None,
                "rows": [
                    {
                        "streams": n,
                        "metric": c.metric,
                        "q": c.q,
                        "direct_ms": c.direct_ms,
                        "pipeline_ms": c.pipeline_ms,
                        "added_ms": c.added_ms,
                        "ratio": c.ratio,
                    }
                    for n, c in zip([n for n in levels for _ in range(4)], rows, strict=True)
                ],
                "turns_per_s": {
                    n: results[n]["pipeline"].turns / results[n]["pipeline"].wall_s for n in levels
                },
                "p99_itl_ms_pipeline": {
                    n: percentile(results[n]["pipeline"].itl_ms, 99) for n in levels
                },
            },
            indent=2,
        )
    )
    plot(f"{args.engine}, {args.arrivals} arrivals", results, stem.with_suffix(".png"), labels)
    print(f"\nwrote {stem}.json and {stem}.png")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=["fake", "vllm", "transformers"], default="fake")
    parser.add_argument("--concurrency", default="1,16,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    parser.add_argument("--arrivals", choices=["staggered", "burst"], default="staggered")
    parser.add_argument("--stagger-s", type=float, default=1.0)
    parser.add_argument(
        "--doors",
        action="store_true",
        help="compare the WebSocket door with the HTTP/SSE door instead of the direct engine",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="compare the pipeline with tracing off and on (OTLP) instead of the direct engine",
    )
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
