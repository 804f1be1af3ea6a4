"""`python -m bench.preprocess`: the command line."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import uuid

import uvloop

from bench.preprocess.common import FIGURES, RESULTS, progress
from bench.preprocess.figure import plot
from bench.preprocess.inprocess import part_a, report_a
from bench.preprocess.media import build_clips
from bench.preprocess.pipeline import part_bc, report_b, report_c
from bench.stats import percentile
from runtime.settings import Settings


async def main_async(args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    settings = Settings.from_env(namespace=f"bench-pre-{uuid.uuid4().hex[:6]}")
    started = time.perf_counter()
    progress(f"building {args.clips} spoken clips (espeak-ng → WebM/Opus)")
    clips = build_clips(args.clips)
    summary: dict = {
        "clips": [{"text": c.text, "audio_s": c.audio_s, "speech_s": c.speech_s} for c in clips],
        "args": vars(args),
    }
    a = bc = None
    if "a" in parts:
        a = await part_a(args, settings, clips)
    if parts & {"b", "c"}:
        bc = await part_bc(args, clips)
    if a is not None:
        summary["a"] = report_a(a)
    if bc is not None:
        summary["b"] = report_b(bc)
        speech_p50 = percentile(a["speech"][0].latency_ms, 50) if a else None
        summary["c"] = report_c(bc, speech_p50)
        summary["namespace"] = bc["settings"].namespace
    summary["wall_s"] = time.perf_counter() - started
    RESULTS.mkdir(parents=True, exist_ok=True)
    FIGURES.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / "preprocess"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=str))
    plot(a, bc, stem.with_suffix(".png"))
    shutil.copyfile(stem.with_suffix(".png"), FIGURES / "preprocess.png")
    print(f"\nwrote {stem}.json, {stem}.png (copied to bench/figures/preprocess.png)")
    print(f"total {summary['wall_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.preprocess",
        description=sys.modules["bench.preprocess"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--parts", default="a,b,c", help="any of a,b,c")
    parser.add_argument("--clips", type=int, default=12, help="spoken clips for (a) and (c)")
    parser.add_argument("--small-images", type=int, default=100, help="1024x768 JPEGs")
    parser.add_argument("--large-images", type=int, default=24, help="4000x3000 JPEGs")
    parser.add_argument("--text-turns", type=int, default=200, help="per concurrency level")
    parser.add_argument("--text-concurrency", default="1,8")
    parser.add_argument("--spoken-rounds", type=int, default=12, help="x3 turns each")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--token-interval-ms", type=float, default=20.0)
    uvloop.run(main_async(parser.parse_args()))
