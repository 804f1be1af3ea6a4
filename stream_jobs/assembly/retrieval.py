"""Retrieved context for a prompt: an interface, and a first implementation over a local
document folder embedded with the bundled all-MiniLM-L6-v2 (384-d, cosine similarity).

Documents (`*.md`, `*.txt`) are split into paragraph-sized passages and embedded once at
startup; a query costs one embedding (~30-120 ms on CPU: the caller runs it in a thread).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Protocol

import numpy as np

from runtime.minilm import minilm_path
from stream_jobs.assembly.prompt import Passage

log = logging.getLogger("turnstream.assembly")

MAX_PASSAGE_CHARS = 600


class Retriever(Protocol):
    def search(self, query: str, k: int) -> list[Passage]:
        """The best passages for `query`, most relevant first (blocking)."""


class NoRetrieval:
    def search(self, query: str, k: int) -> list[Passage]:
        return []


def split_passages(name: str, text: str) -> list[tuple[str, str]]:
    """(id, text) per passage: paragraphs, long ones cut at sentence ends (pure)."""
    passages: list[tuple[str, str]] = []
    for block in re.split(r"\n\s*\n", text):
        rest = " ".join(block.split())
        while rest:
            piece = rest[:MAX_PASSAGE_CHARS]
            if len(rest) > MAX_PASSAGE_CHARS and ". " in piece:
                piece = piece[: piece.rindex(". ") + 1]
            passages.append((f"{name}#{len(passages)}", piece))
            rest = rest[len(piece) :].strip()
    return passages


class EmbeddingRetriever:
    def __init__(self, passages: list[tuple[str, str]], *, min_score: float = 0.3) -> None:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(minilm_path()), device="cpu", local_files_only=True)
        self._ids = [p[0] for p in passages]
        self._texts = [p[1] for p in passages]
        self._vectors = self.embed(self._texts) if passages else np.zeros((0, 384), np.float32)
        self.min_score = min_score

    @classmethod
    def from_folder(cls, folder: str | Path, *, min_score: float = 0.3) -> EmbeddingRetriever:
        passages: list[tuple[str, str]] = []
        for path in sorted(Path(folder).rglob("*")):
            if path.suffix in {".md", ".txt"} and path.is_file():
                passages += split_passages(path.name, path.read_text(errors="replace"))
        log.info("retrieval: %d passages from %s", len(passages), folder)
        return cls(passages, min_score=min_score)

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode(texts, normalize_embeddings=True), np.float32)

    def search(self, query: str, k: int) -> list[Passage]:
        if not self._ids or k <= 0:
            return []
        scores = self._vectors @ self.embed([query])[0]
        best = np.argsort(-scores)[:k]
        return [
            Passage(self._ids[i], self._texts[i], float(scores[i]))
            for i in best
            if scores[i] >= self.min_score
        ]
