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
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from bench.stats import Comparison, compare, percentile
from infra.kafka.topics import ensure_topics
from infra.stack import REPO, Child, free_port, start_roles, stop_roles
from schemas.events import DecodingParams, Message, Role
from schemas.settings import Settings
from workers.inference.app import build_engine
from workers.inference.engine import Engine, GenerationRequest
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

RESULTS = REPO / "bench" / "results"
FAKE_TEXT = " ".join(f"w{i}" for i in range(28))  # the fake engine answers ~32 tokens
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


def start_pipeline(settings: Settings, engine: str, logs: Path) -> list[Child]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TURNSTREAM_ENGINE": engine,
        "TURNSTREAM_NAMESPACE": settings.namespace,
        "TURNSTREAM_EDGE_PORT": str(settings.edge_port),
        "TURNSTREAM_FAKE_TOKEN_INTERVAL_MS": str(settings.fake_token_interval_ms),
        "TURNSTREAM_MAX_INFLIGHT_TURNS": str(settings.max_inflight_turns),
        "TURNSTREAM_LOG_LEVEL": "WARNING",
    }
    return start_roles(env, logs, log_prefix="bench-")


def report(engine: str, results: dict[int, dict[str, Samples]]) -> list[Comparison]:
    rows: list[Comparison] = []
    print(f"\n{engine} engine: added latency at the WebSocket client (ms)")
    header = (
        f"{'streams':>7} {'metric':>5} {'q':>4} {'direct':>9} {'pipeline':>9} "
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
    print("\nwhere pipeline TTFT goes (ms, p50 / p99)")
    print(f"{'streams':>7} {'accepted':>15} {'queued':>15} {'worker ttft':>15}")
    for n, pair in results.items():
        p = pair["pipeline"]
        cells = [
            f"{percentile(v, 50):6.1f} / {percentile(v, 99):6.1f}"
            for v in (p.accept_ms, p.queue_ms, p.server_ttft_ms)
        ]
        print(f"{n:>7} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15}")
    return rows


def plot(engine: str, results: dict[int, dict[str, Samples]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, metric in zip(axes, ("ttft", "itl"), strict=True):
        for n, pair in results.items():
            for side, style in (("direct", "--"), ("pipeline", "-")):
                values = sorted(getattr(pair[side], f"{metric}_ms"))
                if not values:
                    continue
                ys = [i / len(values) for i in range(1, len(values) + 1)]
                ax.plot(values, ys, style, label=f"{side}, {n} streams")
        ax.set_xscale("log")
        ax.set_xlabel(f"{metric.upper()} (ms, log)")
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"turnstream pipeline vs in-process engine ({engine})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


async def main_async(args: argparse.Namespace) -> None:
    levels = [int(x) for x in args.concurrency.split(",")]
    base = Settings.from_env()
    settings = Settings.from_env(
        namespace=f"bench-{uuid.uuid4().hex[:6]}",
        edge_port=free_port(),
        engine=args.engine,
        fake_token_interval_ms=args.token_interval_ms,
        max_inflight_turns=max(levels) * 2,
    )
    await asyncio.to_thread(
        subprocess.run, [str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    text = FAKE_TEXT if args.engine == "fake" else VLLM_TEXT
    decoding = DecodingParams(max_tokens=args.max_tokens, temperature=0.0)
    results: dict[int, dict[str, Samples]] = {n: {} for n in levels}
    stagger = 0.0 if args.arrivals == "burst" else args.stagger_s
    random.seed(0)

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

    print("[pipeline] edge → Kafka → worker → Redis → edge", file=sys.stderr)
    children = start_pipeline(settings, args.engine, base.state_path / "logs")
    try:
        url = f"ws://127.0.0.1:{settings.edge_port}/"
        token = mint_token(settings.auth_secret, "bench", "bench")
        # warm-up: consumer group join, connections, caches
        await run_pipeline(url, token, 2, 1, text=text, decoding=decoding, stagger_s=0)
        for n in levels:
            results[n]["pipeline"] = await run_pipeline(
                url, token, n, args.rounds, text=text, decoding=decoding, stagger_s=stagger
            )
            print(
                f"  {n:>4} streams: {results[n]['pipeline'].turns} turns "
                f"in {results[n]['pipeline'].wall_s:.1f} s",
                file=sys.stderr,
            )
    finally:
        stop_roles(children)

    rows = report(f"{args.engine}, {args.arrivals} arrivals", results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"pipeline-latency-{args.engine}-{args.arrivals}"
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "engine": args.engine,
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
    plot(f"{args.engine}, {args.arrivals} arrivals", results, stem.with_suffix(".png"))
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
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
