"""The multilingual category classifier against today's checks, on the held-out test split.

    python -m bench.safety_categories            # ~2 min on one core
    python -m bench.safety_categories --split train   # the training split (sanity only)

Each test example goes through both screens as the stack runs them: a user `prompt` through
`InputScreen.assess`, an assistant `output` streamed word by word through the `Windower`
(50 tokens, 10 of overlap) and `OutputCheck`, stopped at the first cut. "today" is the
rules and the profanity model (categories off), "new" adds the classifier, "classifier"
is the classifier alone. Prints harmful recall per category and per language, over-refusal
on safe texts and on near-misses, and the check's time per 50-token window per language
(windows cut from each language's test texts run together); writes
bench/results/safety_categories.json and the figure bench/figures/safety_categories.png.
The test files were written by other authors than the training files of each language.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.plotting import RESULTS, save_figure
from bench.stats import percentile
from moderation.categories.classifier import shared
from moderation.categories.dataset import Example, load_split
from moderation.categories.labels import HARMFUL
from moderation.rules import RuleSet
from moderation.screen import InputScreen, OutputCheck, SafetyConfig
from moderation.windows import Windower

WINDOW, OVERLAP = 50, 10
# One token: a CJK or kana character, else a word with its trailing space.
_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+\\s*|\\s+")
SYSTEMS = ("today", "new", "classifier")


@dataclass(frozen=True)
class System:
    name: str
    screen: InputScreen
    check: OutputCheck


def systems() -> list[System]:
    today = SafetyConfig(categories=False)
    new = SafetyConfig()
    alone = SafetyConfig(rules=False, classifier=False, blacklist=False)
    return [
        System("today", InputScreen(today), OutputCheck(today)),
        System("new", InputScreen(new), OutputCheck(new)),
        System("classifier", InputScreen(alone), OutputCheck(alone, rules=RuleSet("none", []))),
    ]


class Tokens:
    """Splits text into the served model's tokens (SmolLM2's tokenizer, as the engine
    streams them), or into words and CJK characters when the model folder is absent."""

    def __init__(self) -> None:
        self._tokenizer = None
        try:
            from transformers import AutoTokenizer

            from runtime.settings import Settings
            from runtime.smollm2 import default_model_dir

            folder = default_model_dir(Settings.from_env())
            if (folder / "tokenizer_config.json").is_file():
                self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        except Exception as err:  # a benchmark without the model still runs
            print(f"no tokenizer ({err!r}): one word = one token", file=sys.stderr)
        self.kind = "smollm2" if self._tokenizer is not None else "words"

    def __call__(self, text: str) -> list[str]:
        if self._tokenizer is None:
            return _TOKEN.findall(text)
        spans = self._tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        pieces, last = [], 0
        for _, end in spans["offset_mapping"]:
            if end > last:
                pieces.append(text[last:end])
                last = end
        if last < len(text):
            pieces.append(text[last:])
        return pieces


TOKENS: Tokens | None = None


def tokens(text: str) -> list[str]:
    global TOKENS  # noqa: PLW0603  (one tokenizer per run, loaded on first use)
    if TOKENS is None:
        TOKENS = Tokens()
    return TOKENS(text)


def streamed(check: OutputCheck, text: str) -> tuple[bool, tuple[str, ...]]:
    """Whether streaming `text` gets cut, and the labels of the cutting window."""
    windower = Windower(WINDOW, OVERLAP)
    for token in tokens(text):
        for window in windower.push(token, 1):
            verdict = check.check(window.text)
            if verdict.stopped:
                return True, verdict.labels
    last = windower.finish()
    if last is not None:
        verdict = check.check(last.text)
        return verdict.stopped, verdict.labels
    return False, ()


def judge(system: System, example: Example) -> tuple[bool, tuple[str, ...]]:
    if example.kind == "output":
        return streamed(system.check, example.text)
    verdict = system.screen.assess(example.text)
    return verdict.stopped, verdict.labels


def rates(examples: Sequence[Example], stopped: Sequence[bool]) -> dict:
    """Recall per category and language, over-refusal overall and on near-misses."""
    by_cat: dict[str, list[bool]] = defaultdict(list)
    by_lang: dict[str, list[bool]] = defaultdict(list)
    safe: list[bool] = []
    near: list[bool] = []
    for example, hit in zip(examples, stopped, strict=True):
        if example.harmful:
            by_cat[example.label].append(hit)
            by_lang[example.lang].append(hit)
        else:
            safe.append(hit)
            if example.near_miss:
                near.append(hit)
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    harmful = [h for e, h in zip(examples, stopped, strict=True) if e.harmful]
    return {
        "recall": mean(harmful),
        "over_refusal": mean(safe),
        "over_refusal_near_miss": mean(near),
        "recall_by_category": {c: mean(by_cat[c]) for c in HARMFUL if by_cat[c]},
        "recall_by_language": {lang: mean(v) for lang, v in sorted(by_lang.items())},
        "harmful": len(harmful),
        "safe": len(safe),
        "near_miss": len(near),
    }


def window_texts(examples: Sequence[Example]) -> dict[str, list[str]]:
    """50-token windows (with overlap) cut from each language's texts run together."""
    out: dict[str, list[str]] = {}
    for lang in sorted({e.lang for e in examples}):
        windower = Windower(WINDOW, OVERLAP)
        texts: list[str] = []
        for example in (e for e in examples if e.lang == lang):
            for token in tokens(example.text + " "):
                texts.extend(w.text for w in windower.push(token, 1))
        out[lang] = texts
    return out


def time_windows(check: Callable[[str], object], texts: Sequence[str]) -> list[float]:
    times = []
    for text in texts:
        start = time.perf_counter()
        check(text)
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def latency(systems_: Sequence[System], examples: Sequence[Example]) -> dict:
    windows = window_texts(examples)
    out: dict[str, dict] = {}
    for system in systems_:
        per_lang = {}
        every: list[float] = []
        for lang, texts in windows.items():
            times = time_windows(system.check.check, texts)
            every += times
            per_lang[lang] = {"n": len(times), "p50": round(percentile(times, 50), 3),
                              "p99": round(percentile(times, 99), 3)}  # fmt: skip
        per_lang["all"] = {"n": len(every), "p50": round(percentile(every, 50), 3),
                           "p99": round(percentile(every, 99), 3)}  # fmt: skip
        out[system.name] = per_lang
    return out


def _table(results: dict, key: str, rows: Sequence[str]) -> None:
    print(f"\n{key:<22}" + "".join(f"{name:>12}" for name in SYSTEMS))
    for row in rows:
        cells = [results[name][key].get(row) for name in SYSTEMS]
        print(f"{row:<22}" + "".join(f"{c * 100:>11.1f}%" if c is not None else f"{'-':>12}"
                                     for c in cells))  # fmt: skip


def report(results: dict, timing: dict) -> None:
    first = results["new"]
    print(f"\nheld-out: {first['harmful']} harmful, {first['safe']} safe "
          f"({first['near_miss']} near-misses)")  # fmt: skip
    print(f"{'':<22}" + "".join(f"{name:>12}" for name in SYSTEMS))
    for key in ("recall", "over_refusal", "over_refusal_near_miss"):
        print(f"{key:<22}" + "".join(f"{results[n][key] * 100:>11.1f}%" for n in SYSTEMS))
    _table(results, "recall_by_category", HARMFUL)
    _table(results, "recall_by_language", list(first["recall_by_language"]))
    print(f"\nms per {WINDOW}-token window (p50 / p99; tokens: {TOKENS.kind if TOKENS else '?'})")
    langs = list(timing["new"])
    print(f"{'':<10}" + "".join(f"{lang:>14}" for lang in langs))
    for name in SYSTEMS:
        cells = [f"{timing[name][lang]['p50']:.2f}/{timing[name][lang]['p99']:.1f}"
                 for lang in langs]  # fmt: skip
        print(f"{name:<10}" + "".join(f"{c:>14}" for c in cells))


def plot(results: dict, timing: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key in zip(axes[:2], ("recall_by_language", "recall_by_category"), strict=True):
        rows = list(results["new"][key])
        width = 0.27
        for i, name in enumerate(SYSTEMS):
            values = [(results[name][key].get(r) or 0) * 100 for r in rows]
            ax.bar([x + (i - 1) * width for x in range(len(rows))], values, width, label=name)
        ax.set_xticks(range(len(rows)), rows, rotation=45, ha="right")
        ax.set_ylabel("harmful stopped (%)")
        ax.axhline(90, color="grey", linestyle=":")
        ax.set_title(key.replace("_", " "))
    axes[0].legend()
    langs = [lang for lang in timing["new"] if lang != "all"]
    for name in SYSTEMS:
        axes[2].plot(langs, [timing[name][lang]["p50"] for lang in langs], marker="o", label=name)
    axes[2].axhline(15, color="grey", linestyle=":")
    axes[2].set_ylabel(f"ms per {WINDOW}-token window (p50)")
    axes[2].set_title("check time per window")
    axes[2].legend()
    fig.tight_layout()
    save_figure(fig, "safety_categories")


PROBES = Path(__file__).resolve().parent.parent / "moderation/redteam/categories/probes.jsonl"


def probes(all_systems: Sequence[System]) -> list[dict]:
    """Attacks outside the data set (obfuscation, role-play, translation, build-up, split
    windows): each through every system; `split-window` ones stream as answers."""
    rows = []
    for line in PROBES.read_text(encoding="utf-8").splitlines():
        probe = json.loads(line)
        kind = "output" if probe["attack"] == "split-window" else "prompt"
        example = Example(probe["id"], "?", "safe", kind, False, probe["text"])
        outcome = {s.name: judge(s, example)[0] for s in all_systems}
        rows.append({**probe, **outcome})
    print(f"\nprobes (outside the data set): {'':<8}" + "".join(f"{n:>11}" for n in SYSTEMS))
    for row in rows:
        marks = "".join(f"{'stopped' if row[n] else 'passed':>11}" for n in SYSTEMS)
        print(f"{row['id']:<9} {row['attack']:<14} {row['expected']:<8}{'':<5}{marks}  "
              f"{row['text'][:50]}")  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=("test", "train"))
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    examples = load_split(args.split)
    all_systems = systems()
    for system in all_systems:
        system.screen.warm_up()
        system.check.warm_up()
    print(f"model: {shared().model.meta.get('train_fingerprint', '?')[:12]}", file=sys.stderr)
    results: dict[str, dict] = {}
    verdicts: dict[str, list] = {}
    for system in all_systems:
        outcomes = []
        for n, example in enumerate(examples, 1):
            outcomes.append(judge(system, example))
            if n % 50 == 0 or n == len(examples):
                print(f"\r{system.name}: {n}/{len(examples)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        verdicts[system.name] = outcomes
        results[system.name] = rates(examples, [hit for hit, _ in outcomes])
    timing = latency(all_systems, examples)
    report(results, timing)
    probed = probes(all_systems)
    missed = [
        {"id": e.id, "text": e.text[:160], "labels": list(labels)}
        for e, (hit, labels) in zip(examples, verdicts["new"], strict=True)
        if hit != e.harmful
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "safety_categories.json"
    payload = {
        "split": args.split,
        "results": results,
        "timing": timing,
        "wrong": missed,
        "probes": probed,
    }
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False))
    print(f"\nwrote {path}")
    if not args.no_plot:
        plot(results, timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
