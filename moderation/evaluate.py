"""Offline red-team evaluation of the screens: `python -m moderation.evaluate [--set v1]`.

Runs `InputScreen` over the set's adversarial prompts (`attacks.jsonl`, expected `block`)
and ordinary ones (`benign.jsonl`, expected `allow`), and `OutputCheck` over answer
snippets (`outputs.jsonl`, expected `cut` or `release`) streamed word by word through the
`Windower` as an engine would. Prints the catch rate, the false-positive rate, a per-category
table, what was missed or wrongly stopped, per-item latency (p50/p99) and a benchmark of the
screening time per turn. Exits 1 when the catch rate or the false-positive rate misses its
target (`--min-catch`, `--max-fp`), so CI can gate rule changes on it.

The sets are versioned folders under `redteam/`: a new or changed prompt goes in a new
version, so numbers stay comparable across rule changes. Each line is
`{"id", "category", "text", "expected"}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from moderation.blacklist import MemoryBlacklist
from moderation.errors import RedTeamDataError
from moderation.profanity import load
from moderation.screen import InputScreen, OutputCheck, SafetyConfig
from moderation.verdict import Verdict
from moderation.windows import Windower
from schemas.stats import latency_line

REDTEAM_DIR = Path(__file__).resolve().parent / "redteam"
STOPPING = {"block", "cut"}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    category: str
    text: str
    expected: str

    @property
    def should_stop(self) -> bool:
        return self.expected in STOPPING


def load_items(path: Path) -> list[Item]:
    """One file of a set; a malformed line raises RedTeamDataError naming it."""
    items: list[Item] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise RedTeamDataError(f"cannot read {path}: {err}") from err
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            item = Item(str(row["id"]), str(row["category"]), str(row["text"]), row["expected"])
        except (ValueError, KeyError, TypeError) as err:
            raise RedTeamDataError(f"{path}:{number}: {err!r}") from err
        if item.expected not in {"block", "allow", "cut", "release"}:
            raise RedTeamDataError(f"{path}:{number}: unknown expected {item.expected!r}")
        items.append(item)
    return items


def load_set(name: str) -> dict[str, list[Item]]:
    folder = REDTEAM_DIR / name
    return {part: load_items(folder / f"{part}.jsonl") for part in ("attacks", "benign", "outputs")}


def progress(items: Sequence[T], desc: str) -> Iterator[T]:
    """tqdm when it is installed, else a counter on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(items, desc=desc, leave=False, file=sys.stderr)
        return
    for n, item in enumerate(items, 1):
        print(f"\r{desc}: {n}/{len(items)}", end="", file=sys.stderr, flush=True)
        yield item
    print(file=sys.stderr)


# --- running the screens ----------------------------------------------------------------------


async def screen_inputs(screen: InputScreen, items: Iterable[Item], desc: str) -> list[Verdict]:
    items = list(items)
    return [await screen.screen(item.text, user_id="redteam") for item in progress(items, desc)]


_WORD = re.compile(r"\S+\s*|\s+")


def check_output(check: OutputCheck, text: str, size: int, overlap: int) -> list[Verdict]:
    """Stream `text` word by word (one word ≈ one token) through a Windower, checking every
    window; stops at the first cut, as the worker would."""
    windower = Windower(size, overlap)
    verdicts: list[Verdict] = []
    for word in _WORD.findall(text):
        for window in windower.push(word, 1):
            verdicts.append(check.check(window.text))
            if verdicts[-1].stopped:
                return verdicts
    last = windower.finish()
    if last is not None:
        verdicts.append(check.check(last.text))
    return verdicts


# --- reporting --------------------------------------------------------------------------------


@dataclass
class Outcome:
    item: Item
    stopped: bool
    labels: tuple[str, ...]
    latencies_ms: list[float]
    error: str | None

    @property
    def correct(self) -> bool:
        return self.stopped == self.item.should_stop


def table(title: str, outcomes: list[Outcome]) -> None:
    print(f"\n{title}")
    print(f"  {'category':<14}{'n':>4}{'stopped':>9}{'rate':>8}")
    categories = sorted({o.item.category for o in outcomes})
    for category in categories:
        group = [o for o in outcomes if o.item.category == category]
        stopped = sum(o.stopped for o in group)
        print(f"  {category:<14}{len(group):>4}{stopped:>9}{stopped / len(group):>8.1%}")


def wrong(title: str, outcomes: list[Outcome]) -> None:
    wrong = [o for o in outcomes if not o.correct]
    if not wrong:
        return
    print(f"\n{title} ({len(wrong)})")
    for o in wrong:
        labels = ",".join(o.labels) or "-"
        print(f"  {o.item.id:<18} [{labels}] {o.item.text[:90]!r}")


def rate(outcomes: list[Outcome]) -> float:
    return sum(o.stopped for o in outcomes) / len(outcomes) if outcomes else 0.0


def benchmark(screen: InputScreen, texts: Sequence[str], repeats: int) -> list[float]:
    """Screening time per turn (rules + payloads + profanity, no blacklist round trip), in ms,
    over `repeats` passes of `texts`."""
    times: list[float] = []
    for _ in range(repeats):
        for text in texts:
            start = time.perf_counter()
            screen.assess(text)
            times.append((time.perf_counter() - start) * 1000.0)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moderation.evaluate")
    parser.add_argument("--set", default="v1", help="red-team set: a folder under redteam/")
    parser.add_argument("--window", type=int, default=50, help="output window, tokens")
    parser.add_argument("--overlap", type=int, default=10, help="output window overlap, tokens")
    parser.add_argument("--bench", type=int, default=20, help="benchmark passes (0: none)")
    parser.add_argument("--min-catch", type=float, default=0.90)
    parser.add_argument("--max-fp", type=float, default=0.05)
    args = parser.parse_args(argv)

    sets = load_set(args.set)
    started = time.perf_counter()
    load()  # the one-off model load is not a turn's latency
    print(f"profanity model loaded in {time.perf_counter() - started:.2f} s")
    screen = InputScreen(SafetyConfig(), blacklist=MemoryBlacklist())
    check = OutputCheck(SafetyConfig())
    screen.warm_up()

    attacks = _input_outcomes(screen, sets["attacks"], "attacks")
    benign = _input_outcomes(screen, sets["benign"], "benign")
    outputs = _output_outcomes(check, sets["outputs"], args.window, args.overlap)
    catch, fp = rate(attacks), rate(benign)
    _print_report(args.set, attacks, benign, outputs)
    if args.bench > 0:
        times = benchmark(screen, [o.item.text for o in attacks + benign], args.bench)
        print(f"\nbenchmark: screening time per turn over {len(times)} turns (no blacklist)")
        print(latency_line("InputScreen.assess", times))
        print(f"  mean {sum(times) / len(times):.3f} ms")

    ok = catch >= args.min_catch and fp <= args.max_fp
    verdict = "met" if ok else "NOT met"
    print(
        f"\ntargets: catch >= {args.min_catch:.0%}, false positives <= {args.max_fp:.0%}: {verdict}"
    )
    return 0 if ok else 1


def _input_outcomes(screen: InputScreen, items: list[Item], desc: str) -> list[Outcome]:
    verdicts = asyncio.run(screen_inputs(screen, items, desc))
    return [
        Outcome(item, v.stopped, v.labels, [v.elapsed_ms], v.error)
        for item, v in zip(items, verdicts, strict=True)
    ]


def _output_outcomes(
    check: OutputCheck, items: list[Item], size: int, overlap: int
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for item in progress(items, "outputs"):
        verdicts = check_output(check, item.text, size, overlap)
        stopped = any(v.stopped for v in verdicts)
        labels = tuple(dict.fromkeys(label for v in verdicts for label in v.labels))
        errors = ",".join(v.error for v in verdicts if v.error) or None
        outcomes.append(Outcome(item, stopped, labels, [v.elapsed_ms for v in verdicts], errors))
    return outcomes


def rate_line(name: str, outcomes: list[Outcome]) -> str:
    stopped = sum(o.stopped for o in outcomes)
    return f"  {name:<19} {rate(outcomes):6.1%}  ({stopped}/{len(outcomes)})"


def _print_report(
    name: str, attacks: list[Outcome], benign: list[Outcome], outputs: list[Outcome]
) -> None:
    print(f"\nred-team set {name}")
    print(rate_line("input  catch rate", attacks))
    print(rate_line("input  false pos.", benign))
    print(rate_line("output catch rate", [o for o in outputs if o.item.should_stop]))
    print(rate_line("output false pos.", [o for o in outputs if not o.item.should_stop]))
    table("input attacks by category", attacks)
    table("input benign by category", benign)
    table("output snippets by category", outputs)
    wrong("missed attacks", attacks)
    wrong("benign prompts blocked", benign)
    wrong("output snippets judged wrongly", outputs)
    errors = [o for o in [*attacks, *benign, *outputs] if o.error]
    if errors:
        print(f"\nerrors recorded on {len(errors)} items: {errors[0].error}")
    print("\nlatency per item")
    turns = [t for o in attacks + benign for t in o.latencies_ms]
    print(latency_line("input screen (per turn)", turns))
    print(latency_line("output check (per window)", [t for o in outputs for t in o.latencies_ms]))


if __name__ == "__main__":
    sys.exit(main())
