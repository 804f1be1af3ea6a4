"""The labelled data set the classifier is trained and measured on (`moderation/dataset`).

A version is a folder with `train/` and `test/`, one JSONL file per language; each line is
`{"id", "lang", "label", "kind", "near_miss", "text"}` (`kind`: a user's `prompt` or a
fragment of an assistant's `output`; `near_miss`: a safe text that borrows a harmful
category's words). The test files were written by other authors than the training files of
the same language, so the test split measures phrasings the training never saw.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from moderation.categories.labels import CATEGORIES, SAFE
from moderation.errors import DatasetError

DATASET_DIR = Path(__file__).resolve().parent.parent / "dataset"
VERSION = "v1"
KINDS = frozenset({"prompt", "output"})


@dataclass(frozen=True, slots=True)
class Example:
    id: str
    lang: str
    label: str
    kind: str
    near_miss: bool
    text: str

    @property
    def harmful(self) -> bool:
        return self.label != SAFE


def _example(row: dict, where: str) -> Example:
    try:
        example = Example(
            id=str(row["id"]),
            lang=str(row["lang"]),
            label=str(row["label"]),
            kind=str(row["kind"]),
            near_miss=bool(row["near_miss"]),
            text=str(row["text"]),
        )
    except (KeyError, TypeError) as err:
        raise DatasetError(f"{where}: {err!r}") from err
    if example.label not in CATEGORIES:
        raise DatasetError(f"{where}: unknown label {example.label!r}")
    if example.kind not in KINDS:
        raise DatasetError(f"{where}: unknown kind {example.kind!r}")
    if not example.text.strip():
        raise DatasetError(f"{where}: empty text")
    return example


def split_files(split: str, version: str = VERSION) -> list[Path]:
    folder = DATASET_DIR / version / split
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise DatasetError(f"no data in {folder}")
    return files


def load_split(split: str, version: str = VERSION) -> list[Example]:
    """Every example of `split` ("train" or "test"), ids unique, in file order."""
    examples: list[Example] = []
    seen: set[str] = set()
    for path in split_files(split, version):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                row = json.loads(line)
            except ValueError as err:
                raise DatasetError(f"{where}: {err}") from err
            example = _example(row, where)
            if example.id in seen:
                raise DatasetError(f"{where}: duplicate id {example.id}")
            seen.add(example.id)
            examples.append(example)
    return examples


def fingerprint(split: str, version: str = VERSION) -> str:
    """sha256 of the split's files (names and bytes): the model records the one it was
    trained on, and a test fails when the data changed without retraining."""
    digest = hashlib.sha256()
    for path in split_files(split, version):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
