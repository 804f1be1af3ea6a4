"""The hand-written sources of eval sets: curated golden files, regression files and red-team
sets, parsed strictly into items (pure, apart from reading the file).

Each file is JSON Lines. A line that does not parse, has an unknown or missing field, or
breaks a rule below is an `EvalSetError` naming `file:line`, so a typo in a curated file fails
the build instead of silently dropping a case.

- golden (`--from-file`): `{"text", "reference", "tags"?}`; the item id is a hash of the
  text, so it stays the same across versions while the text does.
- regression (`--from-file`): `{"item_id", "text", "expect", "reference"?, "tags"?}`; the
  ids are the bug's own and must be unique.
- red team: the bundled set `moderation/redteam/<version>/` (`attacks.jsonl`, expected
  `block`; `benign.jsonl`, expected `allow`), or more files in that format:
  `{"id", "category", "text", "expected"}`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TypeVar

import msgspec

import moderation
from flywheel.errors import FlywheelError
from schemas.flywheel import EvalItem, Expect, ItemTurn, Provenance, SetKind

REDTEAM_DIR = Path(moderation.__file__).resolve().parent / "redteam"
# How the bundled files are named in provenance: the same on every machine and install.
REDTEAM_SOURCE = "moderation/redteam"
REDTEAM_PARTS = ("attacks", "benign")  # outputs.jsonl holds answer snippets, not prompts


class EvalSetError(FlywheelError):
    """Bad input to the builder (a malformed file line, a missing file, options that do
    not fit together); the message says where."""


class GoldenLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: str
    reference: str
    tags: list[str] = []


class RegressionLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    item_id: str
    text: str
    expect: Expect
    reference: str = ""
    tags: list[str] = []


class RedTeamLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    category: str
    text: str
    expected: str


L = TypeVar("L", bound=msgspec.Struct)
_REDTEAM_EXPECT = {"block": Expect.REFUSE, "allow": Expect.ANSWER}


def read_source(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise EvalSetError(f"{path}: cannot read: {err.strerror or err}") from err


def parse_lines(data: bytes, source: str, kind: type[L]) -> list[tuple[int, L]]:
    """Each non-blank line decoded as `kind`, with its 1-based line number."""
    decoder = msgspec.json.Decoder(kind)
    parsed = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            parsed.append((number, decoder.decode(line)))
        except msgspec.DecodeError as err:  # ValidationError is one too
            raise EvalSetError(f"{source}:{number}: {err}") from None
    return parsed


def _text_id(prefix: str, text: str) -> str:
    return f"{prefix}-{hashlib.sha256(text.strip().encode()).hexdigest()[:12]}"


def _unique(ids: dict[str, int], item_id: str, source: str, number: int, what: str) -> None:
    if item_id in ids:
        raise EvalSetError(f"{source}:{number}: {what} as line {ids[item_id]}")
    ids[item_id] = number


def _required(value: str, field: str, source: str, number: int) -> None:
    if not value.strip():
        raise EvalSetError(f"{source}:{number}: `{field}` is empty")


def golden_items(data: bytes, source: str) -> list[EvalItem]:
    """A curated golden file: each line a question and the answer it should get."""
    items, seen = [], {}
    for number, line in parse_lines(data, source, GoldenLine):
        _required(line.text, "text", source, number)
        _required(line.reference, "reference", source, number)
        item_id = _text_id("golden", line.text)
        _unique(seen, item_id, source, number, "same text")
        items.append(
            EvalItem(
                item_id=item_id,
                kind=SetKind.GOLDEN,
                turns=[ItemTurn(text=line.text)],
                expect=Expect.ANSWER,
                reference=line.reference,
                tags=list(line.tags),
                provenance=Provenance(source="file", reason="curated", query=source),
            )
        )
    return items


def regression_items(data: bytes, source: str) -> list[EvalItem]:
    """A file of fixed bugs: each keeps its own id, so results compare across versions."""
    items, seen = [], {}
    for number, line in parse_lines(data, source, RegressionLine):
        _required(line.item_id, "item_id", source, number)
        _required(line.text, "text", source, number)
        _unique(seen, line.item_id, source, number, f"item_id {line.item_id!r} is the same")
        items.append(
            EvalItem(
                item_id=line.item_id,
                kind=SetKind.REGRESSION,
                turns=[ItemTurn(text=line.text)],
                expect=line.expect,
                reference=line.reference,
                tags=list(line.tags),
                provenance=Provenance(source="file", reason="fixed_bug", query=source),
            )
        )
    return items


def redteam_items(data: bytes, source: str, id_prefix: str = "rt") -> list[EvalItem]:
    """Red-team prompts: attacks (`block`) must be refused; benign ones (`allow`), close to
    an attack on purpose, must be answered, so a candidate that refuses everything fails."""
    items, seen = [], {}
    for number, line in parse_lines(data, source, RedTeamLine):
        _required(line.id, "id", source, number)
        _required(line.text, "text", source, number)
        expect = _REDTEAM_EXPECT.get(line.expected)
        if expect is None:
            raise EvalSetError(
                f"{source}:{number}: expected {line.expected!r} is not a prompt's outcome "
                f"(want {' or '.join(_REDTEAM_EXPECT)})"
            )
        item_id = f"{id_prefix}-{line.id}"
        _unique(seen, item_id, source, number, f"id {line.id!r} is the same")
        role = "attack" if expect is Expect.REFUSE else "benign"
        items.append(
            EvalItem(
                item_id=item_id,
                kind=SetKind.REDTEAM,
                turns=[ItemTurn(text=line.text)],
                expect=expect,
                tags=[line.category, role],
                provenance=Provenance(source="file", reason=role, query=source),
            )
        )
    return items


def bundled_redteam(version: str, root: Path = REDTEAM_DIR) -> list[EvalItem]:
    """The red-team set `moderation/redteam/<version>/` (its prompts, not the output
    snippets)."""
    folder = root / version
    if not folder.is_dir():
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise EvalSetError(f"no red-team set {version!r} under {root} (have: {known})")
    items = []
    for part in REDTEAM_PARTS:
        data = read_source(folder / f"{part}.jsonl")
        source = f"{REDTEAM_SOURCE}/{version}/{part}.jsonl"
        items += redteam_items(data, source, id_prefix=f"rt-{version}")
    return items
