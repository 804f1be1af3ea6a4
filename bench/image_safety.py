"""The image detector (NudeNet, `moderation/image_screen.py`) on benign pictures: how
many it stops (over-refusal), how close each comes to the bar, and what it adds to an
image's preprocessing, against preprocessing without it (today's path) in the same run.

    python -m bench.image_safety               # ~1 min on one core
    python -m bench.image_safety --repeats 5 --no-plot

The pictures are the real photos that ship in installed packages (matplotlib's and
scikit-learn's sample images: a portrait, a landscape, a flower, product shots), each in
seven variants (crop, rotation, mirror, grey, low JPEG quality, small), plus synthetic
near-misses: skin-tone fields, gradients and blob figures on noise. No explicit picture is
kept or made here, so the detector's recall is not measured by this benchmark (say so
wherever its figures are used). Writes bench/results/image_safety.json and the figure
bench/figures/image_safety.png.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageOps

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from moderation.image_screen import ImageScreen
from moderation.nudity import BLOCK_SCORE, EXPLICIT
from moderation.nudity_model import NudityModel
from workers.preprocess.images import ImageLimits, preprocess_image

SKIN = ((255, 224, 196), (234, 192, 134), (198, 134, 66), (141, 85, 36), (92, 51, 23))


@dataclass(frozen=True)
class Picture:
    name: str
    kind: str  # "photo" or "synthetic"
    data: bytes


def _encode(img: Image.Image, fmt: str = "PNG", **params) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


def _photos() -> Iterator[tuple[str, Image.Image]]:
    import matplotlib
    import sklearn.datasets

    sample = Path(matplotlib.get_data_path()) / "sample_data"
    for name in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png", "logo2.png"):
        yield name, Image.open(sample / name).convert("RGB")
    for path in sklearn.datasets.load_sample_images().filenames:
        yield Path(path).name, Image.open(path).convert("RGB")


def _variants(img: Image.Image) -> Iterator[tuple[str, Image.Image]]:
    w, h = img.size
    yield "as is", img
    yield "centre crop", img.crop((w // 4, h // 4, 3 * w // 4, 3 * h // 4))
    yield "rotated", img.rotate(90, expand=True)
    yield "mirrored", ImageOps.mirror(img)
    yield "grey", ImageOps.grayscale(img).convert("RGB")
    yield "jpeg q20", Image.open(io.BytesIO(_encode(img, "JPEG", quality=20)))
    yield "small", img.resize((max(1, w // 4), max(1, h // 4)))


def _synthetic(rng: np.random.Generator) -> Iterator[tuple[str, Image.Image]]:
    for i, tone in enumerate(SKIN):
        yield f"skin field {i}", Image.new("RGB", (320, 240), tone)
        ramp = np.linspace(0.6, 1.2, 320)[None, :, None] * np.array(tone)[None, None, :]
        ramp = np.clip(np.repeat(ramp, 240, axis=0), 0, 255).astype(np.uint8)
        yield f"skin gradient {i}", Image.fromarray(ramp)
        noise = rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)
        figure = Image.fromarray(noise)
        draw = ImageDraw.Draw(figure)
        draw.ellipse((120, 20, 180, 80), fill=tone)  # a head
        draw.ellipse((95, 80, 205, 210), fill=tone)  # a torso
        draw.ellipse((100, 200, 145, 295), fill=tone)  # legs
        draw.ellipse((155, 200, 200, 295), fill=tone)
        yield f"blob figure {i}", figure
    yield "noise", Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))


def pictures(seed: int = 7) -> list[Picture]:
    found = [
        Picture(f"{name} / {variant}", "photo", _encode(img))
        for name, photo in _photos()
        for variant, img in _variants(photo)
    ]
    rng = np.random.default_rng(seed)
    found += [Picture(name, "synthetic", _encode(img)) for name, img in _synthetic(rng)]
    return found


def _timed(fn) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def measure(screen: ImageScreen, items: list[Picture], repeats: int) -> dict:
    """Per picture: preprocessing alone and preprocessing + screen, `repeats` times each,
    interleaved (so drift hits both); the screen's decision and best explicit score."""
    limits = ImageLimits()
    rows = []
    for n, pic in enumerate(items, 1):
        base_ms, base_cpu, with_ms, with_cpu = [], [], [], []
        screening = None
        for _ in range(repeats):
            _, ms, cpu = _timed(lambda p=pic: preprocess_image(p.data, limits))
            base_ms.append(ms)
            base_cpu.append(cpu)

            def both(p=pic):
                image = preprocess_image(p.data, limits)
                return screen.screen(image.view)

            screening, ms, cpu = _timed(both)
            with_ms.append(ms)
            with_cpu.append(cpu)
        explicit = max((s for c, s in screening.scores.items() if c in EXPLICIT), default=0.0)
        rows.append(
            {
                "name": pic.name,
                "kind": pic.kind,
                "stopped": screening.action == "block",
                "best_explicit": explicit,
                "classes": screening.scores,
                "base_ms": float(np.median(base_ms)),
                "with_ms": float(np.median(with_ms)),
                "base_cpu_ms": float(np.median(base_cpu)),
                "with_cpu_ms": float(np.median(with_cpu)),
            }
        )
        print(f"\r  {n}/{len(items)} pictures", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return {"rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict:
    added = [r["with_ms"] - r["base_ms"] for r in rows]
    added_cpu = [r["with_cpu_ms"] - r["base_cpu_ms"] for r in rows]
    by_kind = {}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        by_kind[kind] = {"pictures": len(mine), "stopped": sum(r["stopped"] for r in mine)}
    return {
        "pictures": len(rows),
        "stopped": sum(r["stopped"] for r in rows),
        "by_kind": by_kind,
        "added_ms_p50": percentile(added, 50),
        "added_ms_p99": percentile(added, 99),
        "added_cpu_ms_p50": percentile(added_cpu, 50),
        "base_ms_p50": percentile([r["base_ms"] for r in rows], 50),
        "with_ms_p50": percentile([r["with_ms"] for r in rows], 50),
        "best_explicit_max": max((r["best_explicit"] for r in rows), default=0.0),
        "faces_found": sum(1 for r in rows if {"FACE_FEMALE", "FACE_MALE"} & set(r["classes"])),
    }


def report(result: dict) -> str:
    s = result["summary"]
    lines = [
        f"benign pictures stopped: {s['stopped']}/{s['pictures']} (block bar {BLOCK_SCORE})",
        *(f"  {k}: {v['stopped']}/{v['pictures']}" for k, v in s["by_kind"].items()),
        f"highest explicit-class score on any benign picture: {s['best_explicit_max']:.3f}",
        f"pictures with a face found: {s['faces_found']}",
        f"preprocessing per picture p50: {s['base_ms_p50']:.1f} ms without the screen, "
        f"{s['with_ms_p50']:.1f} ms with it",
        f"added by the screen: p50 {s['added_ms_p50']:.1f} ms, p99 {s['added_ms_p99']:.1f} ms "
        f"(CPU p50 {s['added_cpu_ms_p50']:.1f} ms)",
    ]
    near = sorted(result["rows"], key=lambda r: -r["best_explicit"])[:5]
    lines.append("closest to the bar:")
    lines += [f"  {r['best_explicit']:.3f}  {r['name']}" for r in near]
    return "\n".join(lines)


def plot(result: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    scores = sorted(r["best_explicit"] for r in rows)
    left.plot(range(len(scores)), scores, "o", ms=4)
    left.axhline(BLOCK_SCORE, color="red", ls="--", label=f"block bar {BLOCK_SCORE}")
    left.set(
        title="Best explicit-class score per benign picture",
        xlabel="pictures, sorted",
        ylabel="score",
        ylim=(0, 1),
    )
    left.legend()
    base = [r["base_ms"] for r in rows]
    both = [r["with_ms"] for r in rows]
    right.boxplot([base, both], tick_labels=["preprocess only", "preprocess + screen"])
    right.set(title="Time per picture (median of repeats)", ylabel="ms")
    fig.tight_layout()
    return save_figure(fig, "image_safety")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    screen = ImageScreen(NudityModel.load(threads=args.threads))
    items = pictures()
    print(f"{len(items)} benign pictures, {args.repeats} repeats each", file=sys.stderr)
    result = measure(screen, items, args.repeats)
    result["threads"] = args.threads
    print(report(result))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "image_safety.json").write_text(json.dumps(result, indent=1))
    if not args.no_plot:
        print(f"figure: {plot(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
