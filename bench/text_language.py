"""How well the preprocessing worker names a typed turn's language (the trace's `language`
for typed turns: `workers/preprocess/text_language.py`, fastText lid.176 with a script rule
for CJK), against the rough detector the safety replies use (`moderation/language.py`,
12 languages by script and stop words, English when unsure) as the baseline, on texts none
of them was tuned on:

- `moderation/dataset/v1` (9 languages: the safety classifier's prompts, with slang,
  leetspeak, romanized Hindi and Arabic, code-switching), train and test splits apart: the
  confidence threshold and the script rule were chosen looking at train;
- the spoken sentences of `bench/turn_sets/` (5 languages, short, everyday).

Each text is right, wrong or unknown ("" : too short or unsure; the baseline never says
unknown). Time per text over `--repeats` passes (p50 and spread).

    python -m bench.text_language     # ~20 s

Prints a table; writes bench/results/text_language.json and bench/figures/text_language.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from moderation.language import detect as rough
from workers.preprocess.text_language import detect as lid176

REPO = Path(__file__).resolve().parent.parent
DATASET = REPO / "moderation" / "dataset" / "v1"
TURN_SETS = REPO / "bench" / "turn_sets"
DETECTORS: dict[str, Callable[[str], str]] = {"lid176": lid176, "rough (baseline)": rough}


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def load_sets() -> dict[str, list[tuple[str, str]]]:
    """Set name → (language, text) pairs."""

    def read(paths: list[Path], text_key: str) -> list[tuple[str, str]]:
        rows = [json.loads(line) for p in paths for line in p.open(encoding="utf-8")]
        return [(r["lang"], r[text_key]) for r in rows if r.get("lang") and r.get(text_key)]

    return {
        "dataset/train": read(sorted((DATASET / "train").glob("*.jsonl")), "text"),
        "dataset/test": read(sorted((DATASET / "test").glob("*.jsonl")), "text"),
        "turn_sets": read(sorted(TURN_SETS.glob("*.jsonl")), "complete"),
    }


def score(detect: Callable[[str], str], pairs: list[tuple[str, str]]) -> dict:
    per: dict[str, Counter] = {}
    for language, text in pairs:
        said = detect(text)
        outcome = "unknown" if not said else ("right" if said == language else "wrong")
        per.setdefault(language, Counter())[outcome] += 1
    total = sum((c for c in per.values()), Counter())
    n = sum(total.values())
    return {
        "n": n,
        **{k: total[k] / n for k in ("right", "wrong", "unknown")},
        "languages": {
            lang: {k: c[k] / sum(c.values()) for k in ("right", "wrong", "unknown")}
            for lang, c in sorted(per.items())
        },
    }


def timing(detect: Callable[[str], str], texts: list[str], repeats: int) -> dict:
    per_text_us = []
    for _ in range(repeats):
        start = time.perf_counter()
        for text in texts:
            detect(text)
        per_text_us.append((time.perf_counter() - start) / len(texts) * 1e6)
    return {
        "p50_us": percentile(per_text_us, 50),
        "min_us": min(per_text_us),
        "max_us": max(per_text_us),
    }


def plot(results: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = {name: r["sets"]["dataset/test"]["languages"] for name, r in results.items()}
    languages = sorted(next(iter(test.values())))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(test)
    for i, (name, per) in enumerate(test.items()):
        xs = [j + i * width for j in range(len(languages))]
        right = [per[lang]["right"] for lang in languages]
        wrong = [per[lang]["wrong"] for lang in languages]
        ax.bar(xs, right, width, label=f"{name}: right")
        ax.bar(xs, wrong, width, bottom=right, label=f"{name}: wrong", alpha=0.5, hatch="//")
    ax.set_xticks([j + width * (len(test) - 1) / 2 for j in range(len(languages))], languages)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of texts (rest: unknown)")
    ax.set_title(
        "Typed turn language, moderation/dataset v1 test split (python -m bench.text_language)"
    )
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return save_figure(fig, "text_language")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timing passes per detector")
    args = parser.parse_args(argv)
    sets = load_sets()
    all_texts = [text for pairs in sets.values() for _, text in pairs]
    results: dict = {}
    for name, detect in DETECTORS.items():
        progress(f"{name}: scoring {len(all_texts)} texts in {len(sets)} sets")
        results[name] = {
            "sets": {set_name: score(detect, pairs) for set_name, pairs in sets.items()},
            "time": timing(detect, all_texts, args.repeats),
        }
    print(f"{'detector':18} {'set':14} {'n':>5} {'right':>6} {'wrong':>6} {'unknown':>7}")
    for name, result in results.items():
        for set_name, s in result["sets"].items():
            print(
                f"{name:18} {set_name:14} {s['n']:5d} {s['right']:6.1%} {s['wrong']:6.1%} "
                f"{s['unknown']:7.1%}"
            )
        t = result["time"]
        spread = f"[{t['min_us']:.1f}..{t['max_us']:.1f}]"
        print(f"{name:18} time per text p50 {t['p50_us']:.1f} µs {spread}")
    print("\nper language, dataset/test (right / wrong):")
    for name, result in results.items():
        cells = result["sets"]["dataset/test"]["languages"]
        row = "  ".join(f"{k} {v['right']:.0%}/{v['wrong']:.0%}" for k, v in cells.items())
        print(f"  {name:18} {row}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "text_language.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out} and {plot(results)}")


if __name__ == "__main__":
    main()
