"""The benchmark's figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.preprocess.pipeline import HOPS
from bench.stats import percentile


def cdf(ax, values: Sequence[float], label: str, style: str = "-") -> None:
    xs = sorted(v for v in values if not math.isnan(v))
    if xs:
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], style, label=label)


def plot(a: dict | None, bc: dict | None, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    (ax1, ax2), (ax3, ax4) = axes
    if a is not None:
        plot_a(ax1, ax2, a)
    if bc is not None:
        plot_bc(ax3, ax4, bc)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.suptitle("turnstream preprocessing: throughput and added latency (2-core CPU)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_a(ax1, ax2, a: dict) -> None:
    names = [r.name.replace(", ", ",\n", 1) for r in a["speech"]]
    speeds = [r.audio_per_s for r in a["speech"]]
    bars = ax1.bar(range(len(speeds)), speeds, color="tab:blue")
    for bar, r in zip(bars, a["speech"], strict=True):
        ax1.annotate(
            f"RTF {r.wall_s / r.audio_s:.3f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
        )
    ax1.axhline(1.0, color="grey", ls="--", label="real time")
    ax1.set_xticks(range(len(speeds)), names, fontsize=7)
    ax1.set_ylabel("audio seconds per wall second")
    ax1.set_title("(a) speech: decode → VAD → ASR")
    ax1.legend(fontsize=7)
    for r in a["images"] + a["cache"]:
        if "2 thread" not in r.name:
            cdf(ax2, r.latency_ms, r.name, "--" if "hit" in r.name else "-")
    ax2.set_xscale("log")
    ax2.set_xlabel("per-image latency (ms, log)")
    ax2.set_title("(a) images: preprocess_image; VisionPipeline miss vs hit")
    ax2.legend(fontsize=7)


def plot_bc(ax3, ax4, bc: dict) -> None:
    split = bc["split"]
    groups = {f"text x{n}": bc["pipeline"][n] for n in bc["levels"]}
    for kind in ("spoken", "streamed", "typed"):
        groups[kind] = [t for t in bc["spoken"] if t.kind == kind]
    width = 0.8 / len(groups)
    for g, (name, turns) in enumerate(groups.items()):
        for q, alpha in ((99, 0.35), (50, 1.0)):  # p99 as a pale bar behind p50
            heights = [
                percentile([split[t.turn_id][key] for t in turns if t.turn_id in split], q)
                for _, key in HOPS
            ]
            xs = np.arange(len(HOPS)) + (g - (len(groups) - 1) / 2) * width
            ax3.bar(xs, np.maximum(heights, 0.1), width, color=f"C{g}", alpha=alpha,
                    label=name if q == 50 else None)  # fmt: skip
    ax3.set_xticks(range(len(HOPS)), [label for label, _ in HOPS], fontsize=7, rotation=20)
    ax3.set_yscale("log")
    ax3.set_ylabel("ms per hop (solid p50, pale p99; log)")
    ax3.set_title("(b) where TTFT goes, hop by hop (fake engine)")
    ax3.legend(fontsize=7)
    for n in bc["levels"]:
        cdf(ax4, bc["direct"][n].ttft_ms, f"text x{n}, engine in-process", ":")
        cdf(ax4, [t.ttft_ms for t in bc["pipeline"][n]], f"text x{n}, pipeline")
    for kind in ("typed", "spoken", "streamed"):
        turns = [t for t in bc["spoken"] if t.kind == kind]
        cdf(ax4, [t.ttft_ms for t in turns], f"{kind}: first token")
        if kind != "typed":
            cdf(ax4, [t.transcript_ms for t in turns], f"{kind}: transcript", "--")
    ax4.set_xscale("log")
    ticks = [20, 30, 50, 100, 200, 300, 500, 1000]
    ax4.set_xticks(ticks, [str(t) for t in ticks])
    ax4.minorticks_off()
    ax4.set_xlabel("ms from sending the turn (speech over), log")
    ax4.set_title("(b, c) TTFT at the client")
    ax4.legend(fontsize=7)
