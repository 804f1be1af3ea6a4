"""What the image path costs around the model: the tiny diffusers pipeline called directly
against the same pipeline behind the whole stack, in one run.

The model is the tiny random-weights Stable Diffusion of the tests (a few ms per step on a
CPU), so the numbers are the pipeline's overhead, not a model's: edge → Kafka → preprocessing
(input screen) → assembly (router) → `images.requested` → the image worker (prompt check,
thread hop, a progress frame and a preview per step, PNG encoding, blob store, outcome
recorded in Kafka and Redis) → Redis relay → edge → client. Baseline: `pipeline.generate`
with the same job and a no-op step callback, then PNG encoding. Sequential images give the
latency (client send → `response.done`, and to the first progress frame); a burst of
concurrent requests gives the throughput (one pipeline serves one image at a time, so the
direct burst is the same calls back to back).

    python -m bench.imagegen --images 20 --burst 20     # ~1-2 min on 2 cores
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

import uvloop

from bench.namespace import drop_namespace
from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from harness.stack import pipeline
from harness.tiny_diffusion import build_tiny_diffusion
from runtime.settings import Settings
from workers.imagegen.app import load_pipeline, run_imagegen_worker
from workers.imagegen.pipeline import ImagePipeline
from workers.imagegen.preview import png_bytes
from workers.imagegen.request import ImageJob
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ImageOptions, ResponseImage, ResponseImageProgress

SIDE = 64
STEPS = 4


@dataclass
class Side:
    """One way of making images: latencies (ms) of sequential images, and a burst's rate."""

    name: str
    latency_ms: list[float] = field(default_factory=list)
    first_progress_ms: list[float] = field(default_factory=list)
    burst_images: int = 0
    burst_s: float = 0.0

    @property
    def images_per_s(self) -> float:
        return self.burst_images / self.burst_s if self.burst_s else 0.0

    def summary(self) -> dict:
        return {
            "name": self.name,
            "latency_p50_ms": round(percentile(self.latency_ms, 50), 2),
            "latency_p99_ms": round(percentile(self.latency_ms, 99), 2),
            "first_progress_p50_ms": round(percentile(self.first_progress_ms, 50), 2)
            if self.first_progress_ms
            else None,
            "images_per_s": round(self.images_per_s, 2),
            "latency_ms": [round(v, 2) for v in self.latency_ms],
        }


def note(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def direct_once(tiny: ImagePipeline, seed: int) -> float:
    job = ImageJob("a picture of a cat", SIDE, SIDE, STEPS, seed)
    start = time.perf_counter()
    png_bytes(tiny.generate(job, guidance=0.0, on_step=lambda step, latents: None))
    return (time.perf_counter() - start) * 1000


def run_direct(tiny: ImagePipeline, images: int, burst: int) -> Side:
    side = Side("direct")
    for i in range(2):  # warm-up
        direct_once(tiny, i)
    for i in range(images):
        side.latency_ms.append(direct_once(tiny, 100 + i))
        note(f"direct {i + 1}/{images}: {side.latency_ms[-1]:.1f} ms")
    start = time.perf_counter()
    for i in range(burst):
        direct_once(tiny, 1000 + i)
    side.burst_images, side.burst_s = burst, time.perf_counter() - start
    note(f"direct burst: {side.images_per_s:.1f} images/s")
    return side


async def draw_timed(client: EdgeClient, seed: int) -> tuple[float, float]:
    """(to response.done, to the first progress frame) in ms, from the send."""
    options = ImageOptions(width=SIDE, height=SIDE, steps=STEPS, seed=seed)
    start = time.perf_counter()
    turn_id = await client.start_turn(
        f"c-{uuid.uuid4().hex[:10]}", "draw a picture of a cat", image=options
    )
    first = None
    images = 0
    async for event in client.events(turn_id):
        if isinstance(event, ResponseImageProgress) and first is None:
            first = time.perf_counter()
        images += isinstance(event, ResponseImage)
    end = time.perf_counter()
    assert images == 1 and first is not None, f"turn {turn_id} made no image"
    return (end - start) * 1000, (first - start) * 1000


async def run_pipeline(settings: Settings, tiny: ImagePipeline, images: int, burst: int) -> Side:
    side = Side("pipeline")
    async with (
        pipeline(settings, FakeEngine(token_interval_s=0.005)) as running,
        run_imagegen_worker(settings, tiny),
        EdgeClient.connect(running.url, running.token("bench")) as client,
    ):
        note("stack up; waiting for the image worker to be routed to")
        for _ in range(120):  # the router sees the worker once its board entry is in
            warm = await client.draw(f"c-{uuid.uuid4().hex[:10]}", "draw a cat")
            if warm.images:
                break
            await asyncio.sleep(0.5)
        else:
            raise RuntimeError("the image worker never answered")
        for i in range(2):
            await draw_timed(client, i)
        for i in range(images):
            total, first = await draw_timed(client, 100 + i)
            side.latency_ms.append(total)
            side.first_progress_ms.append(first)
            note(f"pipeline {i + 1}/{images}: {total:.1f} ms (first progress {first:.1f} ms)")
        # one connection per request of the burst (a session holds 8 open turns at most)
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    EdgeClient.connect(running.url, running.token(f"bench-{i}"))
                )
                for i in range(burst)
            ]
            start = time.perf_counter()
            await asyncio.gather(*(draw_timed(c, 1000 + i) for i, c in enumerate(clients)))
            side.burst_images, side.burst_s = burst, time.perf_counter() - start
        note(f"pipeline burst: {side.images_per_s:.1f} images/s")
    return side


def plot(direct: Side, through: Side) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.boxplot([direct.latency_ms, through.latency_ms], tick_labels=["direct", "pipeline"])
    left.set_ylabel("ms per image")
    left.set_title(f"latency, {SIDE}x{SIDE}, {STEPS} steps (tiny SD, CPU)")
    right.bar(["direct", "pipeline"], [direct.images_per_s, through.images_per_s])
    right.set_ylabel("images/s")
    right.set_title("throughput (burst)")
    fig.tight_layout()
    save_figure(fig, "imagegen")


async def main_async(args: argparse.Namespace) -> None:
    base = Settings.from_env()
    model = build_tiny_diffusion(base.state_path / "test-models" / "tiny-sd-v1")
    settings = Settings.from_env(
        namespace=f"bench-img-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        imagegen_model_path=str(model),
        imagegen_width=SIDE,
        imagegen_height=SIDE,
        imagegen_steps=STEPS,
        imagegen_min_side=16,
        imagegen_preview_side=32,
    )
    tiny = await asyncio.to_thread(load_pipeline, settings)
    note(f"direct: {args.images} images, then a burst of {args.burst}")
    direct = await asyncio.to_thread(run_direct, tiny, args.images, args.burst)
    note("pipeline: starting the stack (assembly job ~30 s)")
    try:
        through = await run_pipeline(settings, tiny, args.images, args.burst)
    finally:
        await drop_namespace(settings)
    ratio_latency = percentile(through.latency_ms, 50) / percentile(direct.latency_ms, 50)
    ratio_rate = through.images_per_s / direct.images_per_s
    added = percentile(through.latency_ms, 50) - percentile(direct.latency_ms, 50)
    print(f"image generation, tiny SD on CPU, {SIDE}x{SIDE}, {STEPS} steps, 1 pipeline")
    print(f"{'':>10} {'p50 ms':>9} {'p99 ms':>9} {'images/s':>9}")
    for side in (direct, through):
        s = side.summary()
        print(
            f"{side.name:>10} {s['latency_p50_ms']:>9.1f} {s['latency_p99_ms']:>9.1f} "
            f"{s['images_per_s']:>9.2f}"
        )
    first = percentile(through.first_progress_ms, 50)
    print(f"pipeline / direct: latency p50 x{ratio_latency:.2f} (+{added:.1f} ms), ", end="")
    print(f"throughput x{ratio_rate:.2f}; first progress frame p50 {first:.1f} ms")
    payload = {
        "side": SIDE,
        "steps": STEPS,
        "images": args.images,
        "burst": args.burst,
        "direct": direct.summary(),
        "pipeline": through.summary(),
        "latency_ratio_p50": round(ratio_latency, 3),
        "added_ms_p50": round(added, 2),
        "throughput_ratio": round(ratio_rate, 3),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "imagegen.json").write_text(json.dumps(payload, indent=2))
    plot(direct, through)
    print(f"wrote {RESULTS / 'imagegen.json'} and bench/figures/imagegen.png")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.imagegen", description=__doc__)
    parser.add_argument("--images", type=int, default=20, help="sequential images per side")
    parser.add_argument("--burst", type=int, default=20, help="concurrent requests per side")
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
