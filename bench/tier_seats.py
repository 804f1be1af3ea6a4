"""An enterprise turn's time to first token while free-tier turns saturate the engine, on
real vLLM with the bundled SmolLM2, through the worker's seat gate
(`workers/inference/seats.py`, the path every turn takes before the engine) in front of one
engine (`max_num_seqs` = the seats, vLLM's priority scheduling on), one run:

- unloaded: the enterprise question alone;
- arrival order (the baseline: what the worker did before, when the turns past its batch
  waited in Kafka): seats handed out first come, first served;
- by priority: waiters seated highest tier first, no seat kept;
- by priority, seats kept (the default: `TURNSTREAM_RESERVED_SEATS`, a quarter of the seats
  at most): free turns may not take the last ones.

The load: `--free` free-tier streams at all times (each replaced when it ends), twice the
seats by default, so turns always wait. Every `--every-s` an enterprise question is asked;
its TTFT counts from the moment the worker has it (the seat wait included). Also counted:
free-tier tokens per second (what the kept seats cost them) and that every free request
ended once with a finish reason (vLLM preempts by priority when KV runs out; a preempted
request resumes inside the engine and its stream goes on).

    python -m bench.tier_seats                 # ~4 min on 2 cores
    python -m bench.tier_seats --kv-mb 32 --max-model-len 256   # KV too small: preemptions

Prints a table; writes bench/results/tier_seats.json and bench/figures/tier_seats.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from dataclasses import dataclass, field

from bench.bundled_vllm import start_bundled_vllm
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import GenerationRequest
from workers.inference.seats import EngineSeats, kv_need

FREE, ENTERPRISE = 0, 20  # the tiers' default priorities (ws_edge/admission/tiers.py)
TOPICS = ["rivers", "volcanoes", "bridges", "bees", "comets", "forests", "deserts", "tides"]


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def request(text: str, priority: int, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        request_id=uuid.uuid4().hex,
        messages=[Message(Role.USER, text)],
        decoding=DecodingParams(max_tokens=max_tokens, temperature=0.7),
        priority=priority,
    )


@dataclass
class Run:
    name: str
    ttft_ms: list[float] = field(default_factory=list)
    free_tokens: int = 0
    free_ended: int = 0
    free_unfinished: int = 0  # ended without a finish reason: must stay 0
    seconds: float = 0.0

    def row(self) -> dict:
        t = self.ttft_ms
        return {
            "name": self.name,
            "n": len(t),
            "ttft_p50_ms": percentile(t, 50),
            "ttft_p90_ms": percentile(t, 90),
            "ttft_min_ms": min(t) if t else None,
            "ttft_max_ms": max(t) if t else None,
            "free_tokens_per_s": self.free_tokens / self.seconds if self.seconds else 0.0,
            "free_ended": self.free_ended,
            "free_unfinished": self.free_unfinished,
        }


async def generate(engine, seats: EngineSeats, req: GenerationRequest) -> tuple[float, int, bool]:
    """(ms to the first token from now, tokens, ended with a finish reason)."""
    began = time.perf_counter()
    first, tokens, finished = None, 0, False
    need = kv_need(len(engine.render(req)), req.decoding.max_tokens, engine.block_size)
    async with seats.seat(req.priority, need):
        async for delta in engine.stream(req):
            if first is None and delta.new_tokens:
                first = (time.perf_counter() - began) * 1000
            tokens += delta.new_tokens
            finished = finished or delta.finish_reason is not None
    return first if first is not None else float("nan"), tokens, finished


async def measure(engine, seats: EngineSeats, args, name: str, *, load: bool, tiers: bool) -> Run:
    run = Run(name)
    stop = asyncio.Event()

    async def free_stream(i: int) -> None:
        while not stop.is_set():
            topic = TOPICS[(i + run.free_ended) % len(TOPICS)]
            ask = request(f"Write a long story about {topic}.", FREE, args.free_tokens)
            _, tokens, finished = await generate(engine, seats, ask)
            run.free_tokens += tokens
            run.free_ended += 1
            run.free_unfinished += not finished

    loaders = [asyncio.ensure_future(free_stream(i)) for i in range(args.free if load else 0)]
    began = time.perf_counter()
    try:
        if load:
            await asyncio.sleep(args.warmup_s)
        for i in range(args.samples):
            priority = ENTERPRISE if tiers else FREE  # arrival order: tiers unseen
            ask = request(f"In one sentence, what is {TOPICS[i % len(TOPICS)]}?", priority, 16)
            ttft, _, _ = await generate(engine, seats, ask)
            run.ttft_ms.append(ttft)
            progress(f"{name}: enterprise question {i + 1}/{args.samples}: TTFT {ttft:.0f} ms")
            await asyncio.sleep(args.every_s)
    finally:
        run.seconds = time.perf_counter() - began
        stop.set()
        for task in loaders:  # the free streams still running are stopped, not counted
            task.cancel()
        for task in loaders:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return run


def plot(rows: list[dict], seats: int, name: str = "tier_seats", detail: str = "") -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    names = [r["name"] for r in rows]
    p50 = [r["ttft_p50_ms"] for r in rows]
    p90 = [r["ttft_p90_ms"] for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], p90, 0.4, label="p90")
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylabel("enterprise TTFT, ms")
    ax.set_title(
        f"Enterprise TTFT under a free-tier load, vLLM CPU, SmolLM2-135M, {seats} seats{detail}\n"
        "(python -m bench.tier_seats)",
        fontsize=10,
    )
    ax.legend()
    fig.tight_layout()
    return str(save_figure(fig, name))


async def main_async(args: argparse.Namespace) -> dict:
    progress(f"starting vLLM with the bundled model, max_num_seqs={args.seats}")
    engine = await start_bundled_vllm(
        max_num_seqs=args.seats,
        max_model_len=args.max_model_len,
        kv_cache_bytes=args.kv_mb * 1024 * 1024,
    )
    reserved = max(1, args.seats // 4)
    try:
        await generate(engine, EngineSeats(args.seats), request("Hello!", FREE, 8))  # warm
        configs = [
            ("unloaded", EngineSeats(args.seats), False, True),
            ("arrival order", EngineSeats(args.seats), True, False),
            ("by priority", EngineSeats(args.seats), True, True),
            (
                f"by priority, {reserved} kept",
                EngineSeats(args.seats, reserved=reserved, reserved_priority=10),
                True,
                True,
            ),
        ]
        if args.kv_headroom:
            budget = int((1 - args.kv_headroom) * (engine.cache_tokens or 0))
            progress(f"KV cache {engine.cache_tokens} tokens; the free tier's budget {budget}")
            configs.append(
                (
                    f"{reserved} kept, KV headroom {args.kv_headroom:g}",
                    EngineSeats(args.seats, reserved=reserved, reserved_priority=10, low_kv=budget),
                    True,
                    True,
                )
            )
        runs = []
        skipped = {name.strip() for name in args.skip.split(",") if name.strip()}
        for name, seats, load, tiers in configs:
            if name in skipped:
                continue
            runs.append(await measure(engine, seats, args, name, load=load, tiers=tiers))
        preemptions = engine.snapshot().preemptions
    finally:
        await engine.close()
    rows = [r.row() for r in runs]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "seats": args.seats,
        "free_streams": args.free,
        "kept": reserved,
        "preemptions": preemptions,
        "kv_mb": args.kv_mb,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seats", type=int, default=8, help="the engine's batch")
    parser.add_argument("--free", type=int, default=0, help="free streams (0: twice the seats)")
    parser.add_argument("--free-tokens", type=int, default=96)
    parser.add_argument("--samples", type=int, default=8, help="enterprise questions per run")
    parser.add_argument("--every-s", type=float, default=1.0)
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument(
        "--kv-mb",
        type=int,
        default=256,
        help="the KV cache (32 with --max-model-len 256: "
        "too small for the batch, so vLLM preempts)",
    )
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument(
        "--kv-headroom",
        type=float,
        default=0.0,
        help="also run with the free tier held to 1 - this of the KV cache (its turns' "
        "prompt and longest answer, in blocks)",
    )
    parser.add_argument(
        "--skip", default="", help="runs to leave out, comma-separated names (e.g. 'arrival order')"
    )
    args = parser.parse_args()
    args.free = args.free or 2 * args.seats
    result = asyncio.run(main_async(args))
    print(f"\n{args.free} free streams on {args.seats} seats; enterprise TTFT, ms:")
    print(
        f"{'run':24} {'p50':>7} {'p90':>7} {'min..max':>15} {'free tok/s':>10} {'free ended':>10}"
    )
    for r in result["rows"]:
        spread = f"{r['ttft_min_ms']:.0f}..{r['ttft_max_ms']:.0f}"
        print(
            f"{r['name']:24} {r['ttft_p50_ms']:7.0f} {r['ttft_p90_ms']:7.0f} {spread:>15} "
            f"{r['free_tokens_per_s']:10.1f} {r['free_ended']:10d}"
        )
    unfinished = sum(r["free_unfinished"] for r in result["rows"])
    print(f"free requests ended without a finish reason: {unfinished}")
    print(f"engine preemptions: {result['preemptions']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "tier_seats.json"
    out.write_text(json.dumps(result, indent=2))
    detail = f", KV cache {args.kv_mb} MiB" if args.kv_headroom else ""
    name = "tier_seats_kv" if args.kv_headroom else "tier_seats"
    figure = plot(result["rows"], args.seats, name, detail)
    print(f"wrote {out} and {figure}")


if __name__ == "__main__":
    main()
