"""Offline evaluation of the semantic router:
`python -m bench.eval_router --set v1 [--no-classifier] [--rules FILE]`.

Routes every prompt of a labelled set (`router_sets/<name>.jsonl`, one
`{"text", "intent", "pool", "retrieval", "split"}` per line) and prints, per split, the
accuracy of the pool, the intent and the retrieval decision, an intent confusion matrix, which
stage decided (rule, classifier, default), the per-decision latency (p50/p99) and the
misrouted prompts. Rules are tuned on the `train` split only; `test` is the held-out check, so
a rule written to fix one test prompt makes the test number meaningless. Exits 0 (a report,
not a gate: the unit tests hold the floor).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.stats import latency_line
from stream_jobs.assembly.routing.semantic_router import (
    RouteDecision,
    RouterConfig,
    SemanticRouter,
    minilm_embedder,
)
from stream_jobs.errors import StreamJobError

SETS_DIR = Path(__file__).resolve().parent / "router_sets"
SPLITS = ("train", "test")


class RouterSetError(StreamJobError, ValueError):
    """A labelled set that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Example:
    text: str
    intent: str
    pool: str
    retrieval: bool
    split: str = "train"


@dataclass(frozen=True, slots=True)
class Outcome:
    example: Example
    decision: RouteDecision
    latency_ms: float

    @property
    def pool_ok(self) -> bool:
        return self.decision.pool == self.example.pool

    @property
    def intent_ok(self) -> bool:
        return self.decision.intent == self.example.intent

    @property
    def retrieval_ok(self) -> bool:
        return self.decision.retrieval == self.example.retrieval

    @property
    def stage(self) -> str:
        """rule, classifier, default or follow-up: the reason's first word."""
        return re.split(r"[^\w-]", self.decision.reason, maxsplit=1)[0]


def load_set(name_or_path: str) -> list[Example]:
    """A set by name (`v1`) or path; a malformed line raises RouterSetError naming it."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SETS_DIR / f"{name_or_path}.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise RouterSetError(f"cannot read {path}: {err}") from err
    examples: list[Example] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            example = Example(
                str(row["text"]),
                str(row["intent"]),
                str(row["pool"]),
                row["retrieval"],
                str(row.get("split", "train")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise RouterSetError(f"{path}:{number}: {err!r}") from err
        if not isinstance(example.retrieval, bool) or example.split not in SPLITS:
            raise RouterSetError(f"{path}:{number}: retrieval must be a bool, split train/test")
        examples.append(example)
    return examples


def accuracy(outcomes: Sequence[Outcome], field: str) -> float:
    """Share of outcomes whose `field` (pool, intent or retrieval) is right."""
    if not outcomes:
        return 0.0
    return sum(getattr(o, f"{field}_ok") for o in outcomes) / len(outcomes)


def confusion(outcomes: Sequence[Outcome]) -> tuple[list[str], Counter[tuple[str, str]]]:
    """Intent labels (expected and decided) and counts of (expected, decided)."""
    labels = sorted({o.example.intent for o in outcomes} | {o.decision.intent for o in outcomes})
    return labels, Counter((o.example.intent, o.decision.intent) for o in outcomes)


def route_all(router: SemanticRouter, examples: Sequence[Example]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for example in progress(examples, "routing"):
        start = time.perf_counter()
        decision = router.decide(example.text)
        outcomes.append(Outcome(example, decision, (time.perf_counter() - start) * 1000.0))
    return outcomes


def progress(items: Sequence[Example], desc: str) -> Iterator[Example]:
    """A counter on stderr, redrawn at most every 0.2 s."""
    last = 0.0
    for n, item in enumerate(items, 1):
        if time.monotonic() - last > 0.2 or n == len(items):
            last = time.monotonic()
            print(f"\r{desc}: {n}/{len(items)}", end="", file=sys.stderr, flush=True)
        yield item
    print(file=sys.stderr)


# --- reporting ------------------------------------------------------------------------------


def print_report(name: str, outcomes: Sequence[Outcome], classifier: bool) -> None:
    mode = "rules + classifier" if classifier else "rules only"
    print(f"\nrouter set {name} ({len(outcomes)} prompts, {mode})")
    print(f"  {'split':<7}{'n':>5}{'pool':>9}{'intent':>9}{'retrieval':>11}")
    for split in (*SPLITS, "all"):
        group = [o for o in outcomes if split in (o.example.split, "all")]
        print(
            f"  {split:<7}{len(group):>5}{accuracy(group, 'pool'):>9.1%}"
            f"{accuracy(group, 'intent'):>9.1%}{accuracy(group, 'retrieval'):>11.1%}"
        )
    stages = Counter(o.stage for o in outcomes)
    print("\ndecided by: " + ", ".join(f"{s} {n}" for s, n in stages.most_common()))
    for split in SPLITS:
        print_confusion(split, [o for o in outcomes if o.example.split == split])
    print("\nlatency per decision")
    print(latency_line("all", [o.latency_ms for o in outcomes], name_width=11, width=8))
    for stage, _ in stages.most_common():
        print(
            latency_line(
                stage,
                [o.latency_ms for o in outcomes if o.stage == stage],
                name_width=11,
                width=8,
            )
        )
    for split in SPLITS:
        print_misrouted(split, [o for o in outcomes if o.example.split == split])


def print_confusion(split: str, outcomes: Sequence[Outcome]) -> None:
    labels, counts = confusion(outcomes)
    width = max([9, *(len(label) + 1 for label in labels)])
    print(f"\nintent confusion, {split} (rows: expected, columns: decided)")
    print(" " * (width + 2) + "".join(f"{label:>{width}}" for label in labels))
    for expected in labels:
        cells = "".join(f"{counts[expected, decided]:>{width}}" for decided in labels)
        print(f"  {expected:<{width}}{cells}")


def print_misrouted(split: str, outcomes: Sequence[Outcome]) -> None:
    wrong = [o for o in outcomes if not (o.pool_ok and o.intent_ok and o.retrieval_ok)]
    print(f"\nmisrouted, {split} ({len(wrong)}; * marks a wrong pool)")
    for o in wrong:
        e, d = o.example, o.decision
        mark = "*" if not o.pool_ok else " "
        rag = f" rag {e.retrieval}->{d.retrieval}" if not o.retrieval_ok else ""
        text = " ".join(e.text.split())[:80]
        print(f" {mark}{e.intent:>9} -> {d.intent:<9}{rag} [{d.reason}] {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval_router")
    parser.add_argument("--set", default="v1", help="a set in router_sets/ or a .jsonl path")
    parser.add_argument("--rules", help="a rules file (default: the bundled router_rules.json)")
    parser.add_argument("--no-classifier", action="store_true", help="rules and default only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for embedding")
    args = parser.parse_args(argv)

    examples = load_set(args.set)
    config = RouterConfig.from_file(args.rules) if args.rules else RouterConfig.default()
    embed = None
    if not args.no_classifier:
        print("loading all-MiniLM-L6-v2 ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        embed = minilm_embedder()
        import torch  # one query at a time: more threads only contend (~10x slower on 2 cores)

        torch.set_num_threads(args.threads)
        print(f"loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    router = SemanticRouter(config, embed)  # embeds the examples: not a decision's latency
    router.decide("warm up")
    print_report(args.set, route_all(router, examples), embed is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
