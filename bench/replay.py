"""Replay throughput: turns per second a replay pushes through a candidate's pipeline.

It runs the real pipeline (Kafka, Redis, the preprocessing and inference workers, the
assembly job, the safety worker) in a replay namespace of its own with the fake engine at
`--token-ms` per token, and replays an eval set of `--items` single-turn items plus
two-turn conversations, once one conversation at a time (the baseline) and once with
`--concurrency` conversations at once, in the same run. It prints turns/s for each and the
ratio.

    python -m bench.replay --items 200 --concurrency 16
    python -m bench.replay --engine vllm --items 24 --concurrency 8 --max-tokens 32

`--engine vllm` runs the bundled SmolLM2-135M on vLLM (CPU here) instead of the fake.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

from harness.stack import pipeline
from producers.replay.plan import from_eval_items
from producers.replay.runner import Replay, Target
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.flywheel import Candidate, EvalItem, ItemTurn, SetKind
from workers.inference.app import build_engine
from workers.inference.engines.fake_engine import FakeEngine

RESULTS = Path(__file__).parent / "results"


def items(count: int) -> list[EvalItem]:
    """Every fourth item a two-turn conversation (its second turn waits for the first)."""
    made = []
    for i in range(count):
        turns = [ItemTurn(text=f"Question number {i} about the weather today?")]
        if i % 4 == 3:
            turns.insert(0, ItemTurn(text=f"My name is user {i}."))
        made.append(EvalItem(item_id=f"i{i}", kind=SetKind.GOLDEN, turns=turns))
    return made


async def one_run(
    running, concurrency: int, count: int, max_tokens: int | None = None
) -> tuple[int, float, int]:
    settings = running.settings
    redis = redis_client(settings.redis_url)
    target = Target.of(settings, redis, edge_id="bench-replay")
    run_id = f"bench-{concurrency}-{uuid.uuid4().hex[:6]}"
    replay = Replay(
        target,
        run_id=run_id,
        candidate=Candidate(name="bench", max_tokens=max_tokens),
        concurrency=concurrency,
        turn_timeout_s=120,
        progress=lambda line: print(line, end="", file=sys.stderr, flush=True),
    )
    started = time.perf_counter()
    try:
        results = await replay.run(from_eval_items(items(count)))
    finally:
        await redis.aclose()
    seconds = time.perf_counter() - started
    return len(results), seconds, sum(1 for r in results if r.error_code)


async def main_async(args: argparse.Namespace) -> dict:
    settings = Settings.from_env(
        namespace=f"replay-bench-{uuid.uuid4().hex[:6]}", edge_port=0, engine=args.engine
    )
    engine = (
        FakeEngine(token_interval_s=args.token_ms / 1000)
        if args.engine == "fake"
        else build_engine(settings)
    )
    print(f"starting the candidate's pipeline in {settings.namespace}", file=sys.stderr)
    rows = {}
    try:
        await replay_both(settings, engine, args, rows)
    finally:
        await engine.close()
    return rows


async def replay_both(settings: Settings, engine, args: argparse.Namespace, rows: dict) -> None:
    async with pipeline(settings, engine) as running:
        await one_run(running, 4, 8, args.max_tokens)  # warm-up: models, groups settled
        for concurrency in (1, args.concurrency):
            count = args.items if concurrency > 1 else max(args.items // 4, 8)
            turns, seconds, failed = await one_run(running, concurrency, count, args.max_tokens)
            rows[concurrency] = {"turns": turns, "seconds": seconds, "failed": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--token-ms", type=float, default=2.0, help="the fake engine's pace")
    parser.add_argument("--engine", default="fake", choices=["fake", "vllm"])
    parser.add_argument("--max-tokens", type=int, default=None)
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    print("\n| conversations at once | turns | seconds | turns/s | failed |")
    print("|---|---|---|---|---|")
    rates = {}
    for concurrency, row in rows.items():
        rates[concurrency] = row["turns"] / row["seconds"]
        print(
            f"| {concurrency} | {row['turns']} | {row['seconds']:.1f} | "
            f"{rates[concurrency]:.1f} | {row['failed']} |"
        )
    print(f"\nx{rates[args.concurrency] / rates[1]:.1f} turns/s with {args.concurrency} at once")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"replay-{args.engine}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
