"""What resumable streams cost the relay: the logging script against plain PUBLISH.

Workers used to publish each batch as one PUBLISH per edge channel; now each turn's frames
go through `RELAY_SCRIPT` (XADD to the turn's log + PUBLISH to the edge and its watchers).
This runs the same workload both ways on the real Redis, in one run: `streams` answers of
`tokens` frames each, published as fast as the relay takes them, with one subscriber
reading everything. It prints frames/s, Redis CPU per 1k frames and the memory the logs
hold per answer, and the ratio (script / plain).

    python -m bench.relay --streams 64 --tokens 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from redis.asyncio import Redis

from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import TokenChunk, TurnStarted
from schemas.turn_log import decode_relay_message
from workers.runtime.relay import LogLimits, RelayPublisher

RESULTS = Path(__file__).parent / "results"


@dataclass
class Run:
    way: str
    frames: int
    seconds: float
    redis_cpu_s: float
    log_bytes_per_answer: float

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds

    @property
    def redis_cpu_ms_per_1k(self) -> float:
        return 1000 * self.redis_cpu_s / (self.frames / 1000)


async def redis_cpu_s(redis: Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def frames_of(turn_id: str, tokens: int) -> list:
    attempt = uuid.uuid4().hex[:8]
    frames: list = [TurnStarted(turn_id=turn_id, worker_id="w", model="m", attempt=attempt)]
    frames += [
        TokenChunk(turn_id=turn_id, seq=i, text=" word", emitted_at_ms=0.0, attempt=attempt)
        for i in range(tokens)
    ]
    return frames


async def count_until(pubsub, expected: int) -> None:
    seen = 0
    async with asyncio.timeout(120):
        while seen < expected:  # None: the subscribe confirmation, or nothing yet
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message is not None:
                seen += len(decode_relay_message(message["data"]))


async def run_way(redis: Redis, names: RedisNames, way: str, streams: int, tokens: int) -> Run:
    channel = names.edge_channel(f"bench-{uuid.uuid4().hex[:6]}")
    pubsub = redis.pubsub()
    await pubsub.subscribe(channel)
    turns = [uuid.uuid4().hex for _ in range(streams)]
    plans = [frames_of(t, tokens) for t in turns]
    total = sum(len(p) for p in plans)
    relay = RelayPublisher(redis, names, limits=LogLimits(live_ttl_s=120, done_ttl_s=60))
    sender = asyncio.create_task(relay.run())
    cpu0, t0 = await redis_cpu_s(redis), time.perf_counter()
    reader = asyncio.create_task(count_until(pubsub, total))
    if way == "script":
        for step in range(tokens + 1):  # interleaved like concurrent answers
            for plan in plans:
                relay.publish(channel, plan[step])
            if step % 8 == 7:
                await asyncio.sleep(0)  # let batches form and ship, as a worker's loop does
        await relay.flushed()
    else:  # the previous relay: one PUBLISH of a JSON array per channel and batch
        for start in range(0, tokens + 1, 8):
            batch = [
                encode(plan[i]) for i in range(start, min(start + 8, tokens + 1)) for plan in plans
            ]
            await redis.publish(channel, b"[" + b",".join(batch) + b"]")
    await reader
    seconds = time.perf_counter() - t0
    cpu = await redis_cpu_s(redis) - cpu0
    sender.cancel()
    log_bytes = 0.0
    if way == "script":
        sizes = [await redis.memory_usage(names.turn_log_key(t)) or 0 for t in turns[:8]]
        log_bytes = sum(sizes) / len(sizes)
        await redis.delete(
            *[k for t in turns for k in (names.turn_log_key(t), names.turn_epochs_key(t))]
        )
    await pubsub.aclose()
    return Run(way, total, seconds, cpu, log_bytes)


async def main_async(args: argparse.Namespace) -> list[Run]:
    settings = Settings.from_env()
    redis = redis_client(settings.redis_url)
    names = RedisNames.for_namespace(f"bench-relay-{uuid.uuid4().hex[:6]}")
    runs: list[Run] = []
    try:
        for repeat in range(args.repeats):
            for way in ("plain", "script"):
                run = await run_way(redis, names, way, args.streams, args.tokens)
                print(
                    f"  [{repeat + 1}/{args.repeats}] {way:6s} {run.frames_per_s:9.0f} frames/s",
                    flush=True,
                )
                runs.append(run)
    finally:
        await redis.aclose()
    return runs


def best(runs: list[Run], way: str) -> Run:
    return max((r for r in runs if r.way == way), key=lambda r: r.frames_per_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"relay: {args.streams} answers x {args.tokens} frames, {args.repeats} rounds")
    runs = asyncio.run(main_async(args))
    plain, script = best(runs, "plain"), best(runs, "script")
    print("\n| relay | frames/s | Redis CPU ms / 1k frames | log per answer |")
    print("|---|---|---|---|")
    for run in (plain, script):
        kb = f"{run.log_bytes_per_answer / 1024:.1f} KiB" if run.log_bytes_per_answer else "-"
        print(f"| {run.way} | {run.frames_per_s:.0f} | {run.redis_cpu_ms_per_1k:.1f} | {kb} |")
    print(
        f"\nscript / plain: throughput x{script.frames_per_s / plain.frames_per_s:.2f}, "
        f"Redis CPU x{script.redis_cpu_ms_per_1k / plain.redis_cpu_ms_per_1k:.2f}"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "relay.json"
    out.write_text(json.dumps([asdict(r) for r in runs], indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
