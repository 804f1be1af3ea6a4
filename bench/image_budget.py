"""Does the prefill image budget protect the decode of other streams from a burst of image
requests? (`workers/inference/images/image_budget.py`, TURNSTREAM_MAX_PREFILL_IMAGES.)

In-process, real vLLM on the tiny LLaVA the tests build (CLIP tower + 2-layer Llama, random
weights, 576 feature tokens per image). K text streams decode long answers back to back;
after a quiet stretch, R requests of N distinct images each arrive at once (fresh pixels and
tensor keys, so vLLM's processor, encoder and prefix caches all miss). Each image request
does what the worker does: `grant = await budget.acquire(N)` before `engine.stream`, and
`grant.release()` at its first delta. Trials alternate between no budget (ImageBudget(0))
and the budget (ImageBudget(2) by default) on the same engine.

Measured: the text streams' gaps between deltas (what a reader sees as a stall) in the quiet
stretch (baseline) and in the burst window (burst start → the last image request's first
token), and the image requests' TTFT from their arrival (budget wait included).

    python -m bench.image_budget
    python -m bench.image_budget --trials 8 --image-requests 8 --images 3

The tiny model's max_position_embeddings is 2048, which vLLM enforces as max_model_len, so a
request holds at most 3 images (3 x 576 + text); the default is 3. Prints p50/p99/max and
the ratio budget / no budget; writes bench/results/image-budget.{json,png} and copies the
figure to bench/figures/image-budget.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import uvloop

from bench.stats import percentile, summary
from harness.media import encode_image, noise_image
from infra.stack import REPO
from runtime.settings import Settings
from schemas.events import DecodingParams, ImageInput, Message, Role
from workers.inference.engines.engine import Engine, GenerationRequest
from workers.inference.images.image_budget import ImageBudget
from workers.preprocess.images import ImageLimits, preprocess_image

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"
STORY = "Tell me a long story about the sea, the ships and the people who sail them."


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Gap:
    at: float  # perf_counter when the delta arrived
    ms: float  # since the previous delta of the same request
    tokens: int


@dataclass
class Trial:
    mode: str
    budget: int
    quiet: list[Gap] = field(default_factory=list)
    burst: list[Gap] = field(default_factory=list)
    image_ttft_ms: list[float] = field(default_factory=list)
    image_wait_ms: list[float] = field(default_factory=list)  # waiting for the budget
    burst_ms: float = 0.0
    burst_start: float = 0.0
    quiet_ms: float = 0.0
    streams: int = 1

    def tokens_per_s(self, which: str) -> float:
        """Text tokens per second per stream in the window: a stall shows as few long gaps,
        which a gap percentile under-weights; decoded tokens per second does not."""
        gaps = self.quiet if which == "quiet" else self.burst
        window_ms = self.quiet_ms if which == "quiet" else self.burst_ms
        return sum(g.tokens for g in gaps) / (window_ms / 1000) / self.streams


@dataclass(frozen=True)
class Picture:
    ref: ImageInput
    pixels: np.ndarray


def pictures(count: int, seed: int) -> list[Picture]:
    """Distinct images through the real preprocessing; a fresh uuid as the tensor key."""
    limits = ImageLimits()
    out = []
    for i in range(count):
        data = encode_image(noise_image(400, 300, seed + i), "JPEG", quality=85)
        image = preprocess_image(data, limits)
        key = f"px:bench:{uuid.uuid4().hex}"
        ref = ImageInput(
            sha256=image.sha256,
            tensor_key=key,
            width=image.width,
            height=image.height,
            num_patches=image.num_patches,
        )
        out.append(Picture(ref, image.pixel_values))
    return out


async def text_stream(
    engine: Engine, stop: asyncio.Event, gaps: list[Gap], max_tokens: int
) -> None:
    """Long greedy answers back to back; gaps between deltas of one request (a request's
    first delta is its TTFT, not a gap)."""
    while not stop.is_set():
        request = GenerationRequest(
            f"text-{uuid.uuid4().hex[:8]}",
            [Message(Role.USER, STORY)],
            DecodingParams(max_tokens=max_tokens, temperature=0.0),
        )
        last: float | None = None
        async with contextlib.aclosing(engine.stream(request)) as stream:
            async for delta in stream:
                now = time.perf_counter()
                if last is not None and delta.new_tokens:
                    gaps.append(Gap(now, (now - last) * 1000, delta.new_tokens))
                last = now
                if stop.is_set():
                    break  # aclosing aborts the request in the engine


async def image_request(
    engine: Engine, budget: ImageBudget, batch: list[Picture], max_tokens: int
) -> tuple[float, float, float]:
    """(TTFT ms from arrival, budget wait ms, first-token perf_counter)."""
    arrived = time.perf_counter()
    grant = await budget.acquire(len(batch))
    waited = (time.perf_counter() - arrived) * 1000
    placeholders = "\n".join(f"<image_{i + 1}>" for i in range(len(batch)))
    request = GenerationRequest(
        f"img-{uuid.uuid4().hex[:8]}",
        [Message(Role.USER, f"{placeholders}\nWhat is in these pictures?")],
        DecodingParams(max_tokens=max_tokens, temperature=0.0),
        images=[p.ref for p in batch],
        pixels=[p.pixels for p in batch],
    )
    first = math.nan
    try:
        async with contextlib.aclosing(engine.stream(request)) as stream:
            async for _ in stream:
                if math.isnan(first):
                    first = time.perf_counter()
                    grant.release()  # prefill (and image encoding) is done
    finally:
        grant.release()
    return (first - arrived) * 1000, waited, first


async def run_trial(
    engine: Engine,
    mode: str,
    budget_images: int,
    batches: list[list[Picture]],
    args: argparse.Namespace,
) -> Trial:
    trial = Trial(mode, budget_images, streams=args.text_streams)
    budget = ImageBudget(budget_images)
    stop = asyncio.Event()
    gaps: list[Gap] = []
    streams = [
        asyncio.create_task(text_stream(engine, stop, gaps, args.text_max_tokens))
        for _ in range(args.text_streams)
    ]
    await asyncio.sleep(args.settle_s)  # every stream past its first token
    quiet_from = time.perf_counter()
    await asyncio.sleep(args.quiet_s)
    trial.burst_start = time.perf_counter()
    trial.quiet_ms = (trial.burst_start - quiet_from) * 1000
    results = await asyncio.gather(
        *(image_request(engine, budget, b, args.image_max_tokens) for b in batches)
    )
    burst_end = max(first for _, _, first in results)
    stop.set()
    await asyncio.gather(*streams)
    trial.image_ttft_ms = [ttft for ttft, _, _ in results]
    trial.image_wait_ms = [wait for _, wait, _ in results]
    trial.burst_ms = (burst_end - trial.burst_start) * 1000
    trial.quiet = [g for g in gaps if quiet_from <= g.at < trial.burst_start]
    trial.burst = [g for g in gaps if trial.burst_start <= g.at <= burst_end]
    return trial


def pooled(trials: list[Trial], mode: str, what: str) -> list[float]:
    out: list[float] = []
    for t in trials:
        if t.mode == mode:
            value = getattr(t, what)
            out += [g.ms for g in value] if what in ("quiet", "burst") else value
    return out


def report(trials: list[Trial], modes: list[str]) -> dict:
    print("\ntext streams' gaps between deltas (ms) and image requests' TTFT (ms)")
    header = (
        f"{'mode':<16} {'quiet gap p50/p99/max':>22} {'burst gap p50/p99/max':>24} "
        f"{'tok/s/stream q|b':>16} {'image TTFT p50/p99':>19} {'budget wait p50':>15} "
        f"{'burst ms':>9}"
    )
    print(header)
    rows: dict[str, dict] = {}
    for mode in modes:
        quiet, burst = pooled(trials, mode, "quiet"), pooled(trials, mode, "burst")
        ttft, wait = pooled(trials, mode, "image_ttft_ms"), pooled(trials, mode, "image_wait_ms")
        tokens = [g.tokens for t in trials if t.mode == mode for g in t.burst]
        burst_ms = [t.burst_ms for t in trials if t.mode == mode]
        rate_q = float(np.mean([t.tokens_per_s("quiet") for t in trials if t.mode == mode]))
        rate_b = float(np.mean([t.tokens_per_s("burst") for t in trials if t.mode == mode]))
        q, b = summary(quiet), summary(burst)
        print(
            f"{mode:<16} {q['p50']:6.1f} /{q['p99']:6.1f} /{q['max']:6.1f} "
            f"{b['p50']:7.1f} /{b['p99']:7.1f} /{b['max']:7.1f} "
            f"{rate_q:7.0f} |{rate_b:7.0f} "
            f"{percentile(ttft, 50):8.0f} /{percentile(ttft, 99):8.0f} "
            f"{percentile(wait, 50):15.0f} {percentile(burst_ms, 50):9.0f}"
        )
        rows[mode] = {
            "quiet_gap_ms": q,
            "burst_gap_ms": b,
            "burst_tokens_per_delta": float(np.mean(tokens)) if tokens else math.nan,
            "text_tokens_per_s_per_stream_quiet": rate_q,
            "text_tokens_per_s_per_stream_burst": rate_b,
            "image_ttft_ms": summary(ttft),
            "image_budget_wait_ms": summary(wait),
            "burst_window_ms": summary(burst_ms),
        }
    base, budgeted = rows[modes[0]], rows[modes[1]]
    ratios = {
        "burst_gap_p50": budgeted["burst_gap_ms"]["p50"] / base["burst_gap_ms"]["p50"],
        "burst_gap_p99": budgeted["burst_gap_ms"]["p99"] / base["burst_gap_ms"]["p99"],
        "burst_gap_max": budgeted["burst_gap_ms"]["max"] / base["burst_gap_ms"]["max"],
        "image_ttft_p50": budgeted["image_ttft_ms"]["p50"] / base["image_ttft_ms"]["p50"],
        "image_ttft_p99": budgeted["image_ttft_ms"]["p99"] / base["image_ttft_ms"]["p99"],
        "text_tokens_per_s_in_burst": budgeted["text_tokens_per_s_per_stream_burst"]
        / base["text_tokens_per_s_per_stream_burst"],
    }
    print(f"\nratio {modes[1]} / {modes[0]}:")
    print(
        "  text gap in burst p50 {burst_gap_p50:.2f}, p99 {burst_gap_p99:.2f}, "
        "max {burst_gap_max:.2f}; image TTFT p50 {image_ttft_p50:.2f}, "
        "p99 {image_ttft_p99:.2f}; text tokens/s in burst {text_tokens_per_s_in_burst:.2f}".format(
            **ratios
        )
    )
    for mode in modes:
        quiet_p99 = rows[mode]["quiet_gap_ms"]["p99"]
        print(
            f"  {mode}: burst gap p99 / quiet gap p99 = "
            f"{rows[mode]['burst_gap_ms']['p99'] / quiet_p99:.1f}"
        )
    return {"modes": rows, "ratios_budget_over_none": ratios}


def plot(trials: list[Trial], modes: list[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8))

    def cdf(ax, values: list[float], label: str, colour: str, style: str = "-") -> None:
        xs = sorted(values)
        if xs:
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.plot(xs, ys, style, color=colour, label=label, drawstyle="steps-post")

    colours = dict(zip(modes, ("tab:red", "tab:blue"), strict=True))
    quiet = pooled(trials, modes[0], "quiet") + pooled(trials, modes[1], "quiet")
    cdf(ax1, quiet, "quiet (no images)", "grey", ":")
    for mode in modes:
        cdf(ax1, pooled(trials, mode, "burst"), f"burst, {mode}", colours[mode])
        cdf(ax2, pooled(trials, mode, "image_ttft_ms"), mode, colours[mode])
    ax1.set_xscale("log")
    ax1.set_xlabel("text stream gap between deltas (ms, log)")
    ax1.set_ylabel("fraction of gaps")
    ax1.set_title("decode of text streams")
    ax2.set_xlabel("image request TTFT from arrival (ms)")
    ax2.set_ylabel("fraction of requests")
    ax2.set_title("image requests")
    for mode in modes:
        trial = next(t for t in trials if t.mode == mode)
        xs = [(g.at - trial.burst_start) * 1000 for g in trial.burst]
        ax3.scatter(xs, [g.ms for g in trial.burst], s=6, color=colours[mode], label=mode)
    ax3.set_yscale("log")
    ax3.set_xlabel("ms since the burst arrived (first trial of each mode)")
    ax3.set_ylabel("text gap (ms, log)")
    ax3.set_title("gaps during one burst")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("prefill image budget vs none: tiny LLaVA on vLLM (CPU, 2 cores)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


async def main_async(args: argparse.Namespace) -> None:
    from harness.tiny_vlm import build_tiny_llava
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    started = time.perf_counter()
    modes = ["no budget", f"budget {args.budget}"]
    budgets = {modes[0]: 0, modes[1]: args.budget}
    per_trial = args.image_requests * args.images
    count = 2 * (args.trials + args.warmup_trials) * per_trial + args.images
    progress(f"preprocessing {count} distinct images")
    pool = pictures(count, seed=100)
    path = build_tiny_llava(Settings.from_env().state_path / "test-models" / "tiny-llava-v1")
    progress(f"starting vLLM on {path} (~40 s on CPU)")
    engine = VllmEngine(
        VllmOptions(
            model_path=str(path),
            model_name="tiny-llava",
            max_model_len=args.max_model_len,
            kv_cache_bytes=256 << 20,
            max_num_seqs=16,
            max_images_per_prompt=5,
        )
    )
    trials: list[Trial] = []
    try:
        progress("warm-up: one text answer, one image request")
        warm = ImageBudget(0)
        await image_request(engine, warm, pool[: args.images], args.image_max_tokens)
        await text_stream_once(engine, args.text_max_tokens)
        pool = pool[args.images :]
        for i in range(2 * args.warmup_trials):  # the first bursts run slower: not recorded
            mode = modes[i % 2]
            batch, pool = pool[:per_trial], pool[per_trial:]
            batches = [batch[k : k + args.images] for k in range(0, per_trial, args.images)]
            trial = await run_trial(engine, mode, budgets[mode], batches, args)
            progress(f"  warm-up burst {i + 1}/{2 * args.warmup_trials}: {trial.burst_ms:.0f} ms")
        for i in range(2 * args.trials):
            mode = modes[i % 2]
            batch = pool[i * per_trial : (i + 1) * per_trial]
            batches = [batch[k : k + args.images] for k in range(0, per_trial, args.images)]
            trial = await run_trial(engine, mode, budgets[mode], batches, args)
            trials.append(trial)
            progress(
                f"  trial {i + 1}/{2 * args.trials} {mode:<10}: burst {trial.burst_ms:5.0f} ms, "
                f"text gap max {max((g.ms for g in trial.burst), default=math.nan):5.1f} ms, "
                f"image TTFT max {max(trial.image_ttft_ms):5.0f} ms"
            )
    finally:
        await engine.close()

    summary = report(trials, modes)
    summary.update(
        {
            "args": vars(args),
            "model": "tiny LLaVA (harness/tiny_vlm.py), fp32, vLLM CPU",
            "tokens_per_image": 576,
            "trials": [
                {
                    "mode": t.mode,
                    "burst_ms": t.burst_ms,
                    "image_ttft_ms": t.image_ttft_ms,
                    "image_wait_ms": t.image_wait_ms,
                    "burst_gaps_ms": [round(g.ms, 3) for g in t.burst],
                    "quiet_gaps_ms": [round(g.ms, 3) for g in t.quiet],
                }
                for t in trials
            ],
            "wall_s": time.perf_counter() - started,
        }
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / "image-budget"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    plot(trials, modes, stem.with_suffix(".png"))
    shutil.copyfile(stem.with_suffix(".png"), FIGURES / "image-budget.png")
    print(f"\nwrote {stem}.json, {stem}.png (copied to bench/figures/image-budget.png)")
    print(f"total {summary['wall_s']:.0f} s")


async def text_stream_once(engine: Engine, max_tokens: int) -> None:
    request = GenerationRequest(
        "warm-text",
        [Message(Role.USER, STORY)],
        DecodingParams(max_tokens=max_tokens, temperature=0.0),
    )
    async for _ in engine.stream(request):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=5, help="per mode, alternating")
    parser.add_argument("--warmup-trials", type=int, default=1, help="per mode, not recorded")
    parser.add_argument("--budget", type=int, default=2, help="images in prefill at once")
    parser.add_argument("--text-streams", type=int, default=4)
    parser.add_argument("--text-max-tokens", type=int, default=256)
    parser.add_argument("--image-requests", type=int, default=6, help="per burst")
    parser.add_argument("--images", type=int, default=3, help="per image request")
    parser.add_argument("--image-max-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--settle-s", type=float, default=0.5)
    parser.add_argument("--quiet-s", type=float, default=1.0)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout: keep tables clean
    uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
