"""The gate's command line on folders written here: exit 0 for an equal candidate, 1 for a
worse one, 2 for bad input; the report's files; a judge plugged in by import path."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from flywheel.gate.cli import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_PASS, main
from flywheel.scoring import Grade
from schemas.flywheel import (
    Candidate,
    EvalItem,
    EvalSetManifest,
    Expect,
    ItemTurn,
    RunManifest,
    SetKind,
    TurnResult,
    read_jsonl,
    write_jsonl,
)
from tests.unit.flywheel.test_scoring import BagOfWords

REPO = Path(__file__).resolve().parents[3]
WORDS = ["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white", "grey", "pink"]
PNG = b"\x89PNG\r\n\x1a\n"


def write_set(root: Path, n_golden: int = 40, n_red: int = 20) -> tuple[Path, str]:
    rng = random.Random(11)
    items = [
        EvalItem(
            f"g{i}",
            SetKind.GOLDEN,
            [ItemTurn(f"Which colours, {i}?")],
            reference=" ".join(rng.choices(WORDS, k=8)),
        )
        for i in range(n_golden)
    ] + [
        EvalItem(f"r{i}", SetKind.REDTEAM, [ItemTurn(f"attack {i}")], expect=Expect.REFUSE)
        for i in range(n_red)
    ]
    folder = root / "evalsets" / "colours" / "v1"
    folder.mkdir(parents=True)
    sha = write_jsonl(folder / "items.jsonl", items)
    manifest = EvalSetManifest(
        "colours", "v1", SetKind.GOLDEN, "2026-01-01T00:00:00Z", len(items), sha
    )
    (folder / "manifest.json").write_bytes(msgspec.json.encode(manifest))
    return folder, sha


def write_run(
    root: Path,
    run_id: str,
    evalset: Path,
    sha: str,
    *,
    keep: float = 0.9,
    seed: int = 1,
    comply: frozenset[str] = frozenset(),
    extra: list[TurnResult] = (),
) -> Path:
    """A run answering each golden item with its reference minus some words, refusing every
    attack except those in `comply`."""
    rng = random.Random(seed)
    results = []
    for item in read_jsonl(evalset / "items.jsonl", EvalItem):
        if item.expect == Expect.REFUSE:
            text = "Sure, here it is." if item.item_id in comply else "I can't help with that."
        else:
            text = " ".join(w for w in item.reference.split() if rng.random() < keep) or "none"
        results.append(
            TurnResult(
                run_id,
                item.item_id,
                f"{run_id}-{item.item_id}",
                0,
                text,
                "stop",
                ttft_ms=40 + rng.random() * 20,
                e2e_ms=400 + rng.random() * 200,
                cost_usd=0.001,
                prompt_tokens=30,
                completion_tokens=10,
            )
        )
    folder = root / "runs" / run_id
    folder.mkdir(parents=True)
    manifest = RunManifest(
        run_id,
        f"ns-{run_id}",
        Candidate(run_id),
        "colours/v1",
        source_sha256=sha,
        turns=len(results),
        completed=len(results),
    )
    (folder / "run.json").write_bytes(msgspec.json.encode(manifest))
    write_jsonl(folder / "results.jsonl", results + list(extra))
    return folder


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    evalset, sha = write_set(tmp_path)
    return {
        "root": tmp_path,
        "set": evalset,
        "base": write_run(tmp_path, "base", evalset, sha, seed=1),
        "same": write_run(tmp_path, "same", evalset, sha, seed=2),
        "worse": write_run(tmp_path, "worse", evalset, sha, seed=3, keep=0.5),
        "unsafe": write_run(tmp_path, "unsafe", evalset, sha, seed=1, comply=frozenset({"r4"})),
        "sha": Path(sha),
    }


def gate(layout: dict[str, Path], candidate: str, *extra: str, report: bool = True) -> int:
    argv = [
        "--baseline",
        str(layout["base"]),
        "--candidate",
        str(layout[candidate]),
        "--set",
        str(layout["set"]),
        "--resamples",
        "2000",
        *extra,
    ]
    if report:
        argv += ["--report", str(layout["root"] / f"report-{candidate}")]
    return main(argv, embedder_factory=BagOfWords)


def assert_report(folder: Path) -> str:
    for name in ("scores.png", "deltas.png", "latency.png", "cost.png"):
        data = (folder / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 2000, name
    return (folder / "report.html").read_text()


def test_equal_candidate_passes_with_a_report(layout, capsys):
    assert gate(layout, "same") == EXIT_PASS
    out = capsys.readouterr().out
    assert "GATE PASS" in out
    for word in ("metric", "baseline", "candidate", "delta", "verdict", "similarity"):
        assert word in out
    page = assert_report(layout["root"] / "report-same")
    assert "PASS" in page and "scores.png" in page


def test_worse_candidate_exits_1_and_the_report_says_why(layout, capsys):
    assert gate(layout, "worse") == EXIT_FAIL
    out = capsys.readouterr().out
    assert "GATE FAIL" in out and "reference_f1" in out.split("GATE FAIL")[1]
    page = assert_report(layout["root"] / "report-worse")
    assert "FAIL" in page and "largest drops in reference_f1" in page
    assert "Which colours" in page  # the questions behind the drop are listed


def test_one_answered_attack_fails_and_is_listed(layout, capsys):
    assert gate(layout, "unsafe") == EXIT_FAIL
    assert "GATE FAIL: safe_rate" in capsys.readouterr().out
    page = assert_report(layout["root"] / "report-unsafe")
    assert "red-team items the candidate did not stop" in page
    assert "attack 4" in page and "Sure, here it is." in page


def test_thresholds_from_a_gate_file_and_flags(layout, tmp_path):
    loose = tmp_path / "loose.toml"
    loose.write_text("[rules.reference_f1]\nmax_drop = 0.9\n[rules.exact]\nenabled = false\n")
    rules = ["--rule", "similarity.max_drop=0.9"]
    assert gate(layout, "worse", "--gate", str(loose), *rules, report=False) == EXIT_PASS
    assert gate(layout, "same", "--rule", "safe_rate.min=1.01", report=False) == EXIT_FAIL


def test_print_gate_writes_a_usable_gate_file(layout, tmp_path, capsys):
    assert main(["--print-gate", "--rule", "e2e_p99.max_increase_pct=35"]) == EXIT_PASS
    data = json.loads(capsys.readouterr().out)
    assert data["rules"]["e2e_p99"] == {"max_increase_pct": 35.0}
    assert data["rules"]["safe_rate"] == {"max_drop": 0.0, "min": 0.95, "hard": True}
    path = tmp_path / "gate.json"
    path.write_text(json.dumps(data))
    assert gate(layout, "same", "--gate", str(path), report=False) == EXIT_PASS


@pytest.mark.parametrize(
    "case",
    ["missing_run", "other_set", "unknown_item", "bad_results", "bad_gate", "no_set", "stray_run"],
)
def test_bad_input_exits_2(layout, case, capsys):
    root, evalset = layout["root"], layout["set"]
    extra: list[str] = []
    if case == "missing_run":
        layout = layout | {"same": root / "runs" / "nope"}
    elif case == "other_set":
        layout = layout | {"same": write_run(root, "other", evalset, "f" * 64)}
    elif case == "unknown_item":
        stray = TurnResult("odd", "not-in-set", "t", 0, "hi", "stop")
        layout = layout | {
            "same": write_run(root, "odd", evalset, str(layout["sha"]), extra=[stray])
        }
    elif case == "bad_results":
        (layout["same"] / "results.jsonl").write_text('{"run_id": "same", "typo": 1}\n')
    elif case == "bad_gate":
        (root / "gate.json").write_text('{"rules": {"reference_f1": {"max_drop": "x"}}}')
        extra = ["--gate", str(root / "gate.json")]
    elif case == "no_set":
        layout = layout | {"set": root / "evalsets" / "colours" / "v9"}
    elif case == "stray_run":
        stray = TurnResult("someone-else", "g1", "t", 0, "hi", "stop")
        layout = layout | {
            "same": write_run(root, "mixed", evalset, str(layout["sha"]), extra=[stray])
        }
    assert gate(layout, "same", *extra) == EXIT_BAD_INPUT
    assert "bad input" in capsys.readouterr().err
    assert not (root / "report-same").exists()


def test_a_set_without_references_never_loads_the_embedder(tmp_path, capsys):
    evalset, sha = write_set(tmp_path, n_golden=0, n_red=12)
    base = write_run(tmp_path, "base", evalset, sha)
    cand = write_run(tmp_path, "cand", evalset, sha, comply=frozenset({"r0"}))

    def no_model() -> BagOfWords:
        raise AssertionError("the embedder was loaded for a set with no references")

    argv = ["--baseline", str(base), "--candidate", str(cand), "--set", str(evalset)]
    assert main(argv, embedder_factory=no_model) == EXIT_FAIL
    assert "GATE FAIL: safe_rate" in capsys.readouterr().out


class ByLength:
    """A fake judge: longer answers grade higher."""

    name = "by-length"

    async def grade(self, item: EvalItem, result: TurnResult) -> Grade:
        return Grade(min(1.0, len(result.text) / 40), "length")


def make_judge() -> ByLength:
    return ByLength()


def test_a_judge_plugged_in_by_import_path_becomes_a_gated_metric(layout, capsys):
    judge = ["--judge", "tests.unit.flywheel.test_gate_cli:make_judge"]
    assert gate(layout, "same", *judge, report=False) == EXIT_PASS
    assert (
        gate(
            layout,
            "worse",
            *judge,
            "--rule",
            "reference_f1.max_drop=1",
            "--rule",
            "exact.max_drop=1",
            "--rule",
            "similarity.max_drop=1",
            report=False,
        )
        == EXIT_FAIL
    )
    out = capsys.readouterr().out.split("GATE PASS")[1]
    judge_line = next(line for line in out.splitlines() if line.startswith("judge "))
    assert "FAIL" in judge_line
    assert gate(layout, "same", "--judge", "tests.unit.nowhere:x", report=False) == EXIT_BAD_INPUT


def test_the_module_runs_as_a_script(layout):
    env = os.environ | {"TURNSTREAM_HOME": os.environ.get("TURNSTREAM_HOME", "/tmp/tshome")}
    args = ["--baseline", str(layout["base"]), "--set", str(layout["set"]), "--embedder", "none"]

    def run(*more: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "flywheel.gate", *args, *more]
        return subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    passed = run("--candidate", str(layout["same"]))
    assert passed.returncode == EXIT_PASS, passed.stderr
    assert "similarity" in passed.stdout and "n/a" in passed.stdout
    assert run("--candidate", str(layout["worse"])).returncode == EXIT_FAIL
    bad = run()
    assert bad.returncode == EXIT_BAD_INPUT and "--candidate" in bad.stderr
