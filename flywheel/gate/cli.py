"""`python -m flywheel.gate`: the command line (exit 0 pass, 1 worse, 2 bad input)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from flywheel.errors import GateInputError
from flywheel.gate.inputs import check_inputs, load_run, load_set
from flywheel.gate.outcome import evaluate, judge_runs
from flywheel.gate.rules import config_as_dict, load_config, parse_config
from flywheel.gate.table import format_table
from flywheel.scoring import Embedder, Judge
from schemas.flywheel import (
    Expect,
)

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def load_judge(spec: str) -> Judge:
    """`pkg.module:factory` → factory(), which returns a Judge."""
    module, sep, attr = spec.partition(":")
    if not sep:
        raise GateInputError(f"--judge {spec!r}: expected pkg.module:factory")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise GateInputError(f"--judge {spec!r}: {err}") from err
    return factory()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flywheel.gate",
        description="Compare a candidate run to a baseline run of the same eval set; "
        "exit 0 pass, 1 the candidate is worse, 2 bad input.",
    )
    parser.add_argument("--baseline", type=Path, help="baseline run folder (run.json)")
    parser.add_argument("--candidate", type=Path, help="candidate run folder")
    parser.add_argument("--set", type=Path, dest="evalset", help="eval set version folder")
    parser.add_argument("--gate", type=Path, help="gate file (.toml or .json) over the defaults")
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="METRIC.KEY=VALUE",
        help="override one threshold, e.g. reference_f1.max_drop=0.05, "
        "e2e_p99.max_increase_pct=30, safe_rate.min=0.99, judge.enabled=false",
    )
    parser.add_argument("--alpha", type=float, help="significance level (default 0.05)")
    parser.add_argument("--seed", type=int, help="bootstrap seed (default 0)")
    parser.add_argument("--resamples", type=int, help="bootstrap resamples (default 5000)")
    parser.add_argument("--report", type=Path, help="write report.html and plots here")
    parser.add_argument(
        "--embedder",
        choices=("minilm", "none"),
        default="minilm",
        help="similarity scores with the bundled MiniLM, or none (no similarity metric)",
    )
    parser.add_argument("--judge", help="pkg.module:factory returning a Judge (optional)")
    parser.add_argument("--judge-concurrency", type=int, default=8)
    parser.add_argument(
        "--print-gate", action="store_true", help="print the effective gate as JSON and exit"
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    embedder_factory: Callable[[], Embedder] | None = None,
) -> int:
    """Run the gate; the exit status. `embedder_factory` replaces `--embedder minilm` (tests)."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.gate, args.rule)
        top = {k: getattr(args, k) for k in ("alpha", "seed", "resamples")}
        config = parse_config({k: v for k, v in top.items() if v is not None}, config)
        if args.print_gate:
            print(json.dumps(config_as_dict(config), indent=2))
            return EXIT_PASS
        missing = [
            f"--{n}"
            for n in ("baseline", "candidate", "set")
            if getattr(args, "evalset" if n == "set" else n) is None
        ]
        if missing:
            raise GateInputError(f"missing {', '.join(missing)}")
        evalset = load_set(args.evalset)
        baseline, candidate = load_run(args.baseline), load_run(args.candidate)
        check_inputs(evalset, baseline, candidate)
        judge = load_judge(args.judge) if args.judge else None
    except GateInputError as err:
        print(f"gate: bad input: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    embedder: Embedder | None = None
    wants_similarity = any(
        i.expect == Expect.ANSWER and i.reference.strip() for i in evalset.items.values()
    )
    if args.embedder == "minilm" and wants_similarity:  # loading MiniLM takes seconds
        if embedder_factory is None:
            from flywheel.embedder import MiniLMEmbedder

            embedder_factory = MiniLMEmbedder
        embedder = embedder_factory()
    grades = None
    if judge is not None:
        print(f"judge: {getattr(judge, 'name', type(judge).__name__)}", file=sys.stderr)
        grades = asyncio.run(
            judge_runs(judge, evalset, baseline, candidate, concurrency=args.judge_concurrency)
        )
    try:
        outcome = evaluate(evalset, baseline, candidate, config, embedder=embedder, grades=grades)
    except GateInputError as err:
        print(f"gate: bad input: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_table(outcome))
    if args.report is not None:
        from flywheel.gate.report import write_report

        written = write_report(outcome, args.report)
        print(f"report: {written}")
    return EXIT_PASS if outcome.passed else EXIT_FAIL
