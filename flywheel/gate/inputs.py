"""The gate's inputs: an eval set and two runs of it, read and checked against each other."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from flywheel.errors import GateInputError
from schemas.flywheel import (
    EvalItem,
    EvalSetManifest,
    RunManifest,
    TurnResult,
    read_jsonl,
)


@dataclass(frozen=True, slots=True)
class EvalSet:
    path: Path
    items: dict[str, EvalItem]
    sha256: str
    manifest: EvalSetManifest | None


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    manifest: RunManifest
    results: list[TurnResult]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise GateInputError(f"{what} {path}: {err.strerror or err}") from err


def load_set(path: Path) -> EvalSet:
    """An eval set version folder: items.jsonl (and manifest.json when there is one)."""
    data = _read(path / "items.jsonl", "eval set items")
    try:
        items = read_jsonl(path / "items.jsonl", EvalItem)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise GateInputError(f"{path / 'items.jsonl'}: {err}") from err
    by_id: dict[str, EvalItem] = {}
    for item in items:
        if item.item_id in by_id:
            raise GateInputError(f"{path / 'items.jsonl'}: item {item.item_id!r} twice")
        by_id[item.item_id] = item
    if not by_id:
        raise GateInputError(f"{path / 'items.jsonl'}: no items")
    sha = hashlib.sha256(data).hexdigest()
    manifest = None
    if (path / "manifest.json").exists():
        try:
            manifest = msgspec.json.decode(
                _read(path / "manifest.json", "eval set manifest"), type=EvalSetManifest
            )
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            raise GateInputError(f"{path / 'manifest.json'}: {err}") from err
        if manifest.items_sha256 and manifest.items_sha256 != sha:
            raise GateInputError(f"{path}: items.jsonl does not match its manifest's sha256")
    return EvalSet(path, by_id, sha, manifest)


def load_run(path: Path) -> Run:
    """A run folder: run.json and results.jsonl (every result of this run's id)."""
    try:
        manifest = msgspec.json.decode(_read(path / "run.json", "run manifest"), type=RunManifest)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise GateInputError(f"{path / 'run.json'}: {err}") from err
    _read(path / "results.jsonl", "run results")
    try:
        results = read_jsonl(path / "results.jsonl", TurnResult)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise GateInputError(f"{path / 'results.jsonl'}: {err}") from err
    strays = {r.run_id for r in results} - {manifest.run_id}
    if strays:
        raise GateInputError(
            f"{path / 'results.jsonl'}: results of other runs {sorted(strays)[:3]} "
            f"in run {manifest.run_id!r}"
        )
    return Run(path, manifest, results)


def check_inputs(evalset: EvalSet, baseline: Run, candidate: Run) -> None:
    """Both runs played this set (`source_sha256`; `source` when neither recorded a hash) and
    every result belongs to one of its items."""
    b, c = baseline.manifest, candidate.manifest
    if b.source_sha256 != c.source_sha256:
        raise GateInputError(
            f"the runs played different sets: baseline {b.source!r} ({b.source_sha256[:12] or '-'})"
            f", candidate {c.source!r} ({c.source_sha256[:12] or '-'})"
        )
    if not b.source_sha256 and b.source != c.source:
        raise GateInputError(f"the runs played different sources: {b.source!r}, {c.source!r}")
    if b.source_sha256 and b.source_sha256 != evalset.sha256:
        raise GateInputError(
            f"the runs played {b.source!r} ({b.source_sha256[:12]}), not the set at "
            f"{evalset.path} ({evalset.sha256[:12]})"
        )
    for run in (baseline, candidate):
        unknown = sorted({r.item_id for r in run.results} - evalset.items.keys())
        if unknown:
            raise GateInputError(
                f"{run.path}: {len(unknown)} result item(s) not in the set, e.g. {unknown[:3]}"
            )
