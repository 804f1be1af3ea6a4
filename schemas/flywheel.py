"""The data flywheel's files: eval sets, replay runs and their per-turn results (pure types).

Three tools meet through these shapes, so each can be built, tested and rerun on its own:

- the eval set builder (`flywheel/evalsets.py`) writes a versioned set:
  `<root>/<name>/<version>/manifest.json` (`EvalSetManifest`) + `items.jsonl` (`EvalItem`s)
  + `media/` (the items' images and audio, copied in so the set is reproducible);
- a replay (`producers/replay/`) plays a set's items (or a slice of recorded turns) into an
  isolated namespace against a candidate configuration and writes
  `<runs>/<run_id>/run.json` (`RunManifest`) + `results.jsonl` (`TurnResult`s), while every
  replayed trace lands in ClickHouse tagged with the run id;
- scoring and the quality gate (`flywheel/gate/`) read two runs' results (a
  baseline and a candidate), score each turn against its item, and decide.

Files are JSON Lines encoded by msgspec: strict on read (unknown fields are errors), so a
typo in a hand-written item fails loudly.
"""

from __future__ import annotations

import enum
import hashlib
from pathlib import Path
from typing import TypeVar

import msgspec


class SetKind(enum.StrEnum):
    GOLDEN = "golden"  # core capabilities, with reference answers
    FIX = "fix"  # recent bad cases: thumbs-down, regenerated, abandoned, safety-flagged
    REDTEAM = "redteam"  # attacks: the expected outcome is a refusal or a block
    MULTIMODAL = "multimodal"  # image and audio turns, media by reference
    REGRESSION = "regression"  # every fixed bug, with what the fix must keep true


class Expect(enum.StrEnum):
    """What a good answer to the item does."""

    ANSWER = "answer"  # answers (scored against `reference` when there is one)
    REFUSE = "refuse"  # refuses, or the input screen or the output check stops it
    ANY = "any"  # no expectation beyond finishing (latency and cost only)


class MediaItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One image or audio clip of an item: a file in the set's `media/` folder."""

    kind: str  # image | audio
    path: str  # relative to the set version's folder
    sha256: str
    format: str = ""


class ItemTurn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One user turn of an item's conversation, in order."""

    text: str
    media: list[MediaItem] = []


class Provenance(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where an item came from: a recorded turn (ClickHouse), a file, or a hand-written case."""

    source: str  # clickhouse | file | manual
    turn_id: str = ""
    conversation_id: str = ""
    tenant_id: str = ""
    recorded_at: str = ""  # ISO 8601
    reason: str = ""  # why it is in the set: thumbs_down, regenerate, safety_block, ...
    query: str = ""  # the query or file that selected it


class EvalItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    item_id: str  # stable across versions of the set (e.g. the source turn's id)
    kind: SetKind
    turns: list[ItemTurn]  # the conversation: the last turn is the one scored
    expect: Expect = Expect.ANSWER
    reference: str = ""  # a reference answer for the last turn (golden sets)
    tags: list[str] = []
    provenance: Provenance = Provenance(source="manual")


class EvalSetManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    version: str
    kind: SetKind
    created_at: str  # ISO 8601
    items: int
    items_sha256: str  # of items.jsonl: a run names exactly what it played
    queries: list[str] = []
    sources: list[str] = []
    notes: str = ""


class Candidate(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A configuration under test: what the replay's stack runs with (each field left empty
    keeps the live setting)."""

    name: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    pool: str = ""
    safety_output_policy: str = ""
    engine: str = ""  # fake | vllm


class RunManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    run_id: str
    namespace: str  # the isolated namespace it ran in (never the live one)
    candidate: Candidate
    source: str  # eval set `name/version`, or a description of the recorded slice
    source_sha256: str = ""
    started_at: str = ""
    finished_at: str = ""
    pace: str = "fast"  # fast | recorded
    turns: int = 0
    completed: int = 0
    failed: int = 0
    notes: str = ""


class TurnResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One replayed turn's outcome (the last turn of an item, or every turn of a slice)."""

    run_id: str
    item_id: str
    turn_id: str
    index: int  # the turn's place in its conversation (0 first)
    text: str  # the answer
    finish_reason: str
    error_code: str = ""
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    e2e_ms: float = 0.0
    cost_usd: float = 0.0
    input_safety: str = ""  # allow | block | ""
    output_cut: bool = False
    scored: bool = True  # False for the earlier turns of a multi-turn item


T = TypeVar("T", bound=msgspec.Struct)


def write_jsonl(path: Path, records: list) -> str:
    """Write records as JSON Lines; the sha256 of what was written."""
    encoder = msgspec.json.Encoder()
    data = b"".join(encoder.encode(r) + b"\n" for r in records)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_jsonl(path: Path, kind: type[T]) -> list[T]:
    decoder = msgspec.json.Decoder(kind)
    return [decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip()]
