"""Semantic cache selection, pure vectors: `unit` embeddings, `best_matches` (brute-force
cosine over a tenant's matrix, skipping what `conflicting` rejects) and `VectorRows`, a
tenant's matrix as one process holds it in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stream_jobs.assembly.cache.rules import conflicting

DIM = 384  # all-MiniLM-L6-v2
CANDIDATES_TRIED = 3  # above-threshold entries confirmed in Redis before calling it a miss


def unit(vector: Sequence[float] | np.ndarray, dim: int = DIM) -> np.ndarray:
    """A float32 unit vector of `dim` (embeddings are compared by dot product)."""
    v = np.asarray(vector, np.float32).reshape(-1)
    if v.shape != (dim,):
        raise ValueError(f"embedding has {v.shape[0]} dimensions, expected {dim}")
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("embedding has no direction (zero or non-finite)")
    return v / norm


def ranked_above(
    matrix: np.ndarray, vector: np.ndarray, threshold: float, usable: np.ndarray | None = None
) -> list[tuple[int, float]]:
    """(row, cosine) of the rows scoring at least `threshold`, best first; rows and vector
    are unit vectors, `usable` masks rows out (expired, other model)."""
    if matrix.shape[0] == 0:
        return []
    scores = matrix @ vector
    ok = scores >= threshold
    if usable is not None:
        ok &= usable
    rows = np.flatnonzero(ok)
    rows = rows[np.argsort(-scores[rows], kind="stable")]
    return [(int(i), float(scores[i])) for i in rows]


def best_matches(
    matrix: np.ndarray,
    vector: np.ndarray,
    queries: Sequence[str],
    query: str,
    threshold: float,
    *,
    usable: np.ndarray | None = None,
    guard: bool = True,
    limit: int = CANDIDATES_TRIED,
) -> list[tuple[int, float]]:
    """Up to `limit` (row, cosine) above the threshold, best first, skipping the rows whose
    stored query `conflicting` rejects against `query` (both normalised)."""
    found: list[tuple[int, float]] = []
    for row, score in ranked_above(matrix, vector, threshold, usable):
        if guard and conflicting(query, queries[row]):
            continue
        found.append((row, score))
        if len(found) == limit:
            break
    return found


class VectorRows:
    """One tenant's entries as this process holds them. Vectors are appended in place and
    removals tombstoned (compacted once a quarter is dead), so a change costs O(1), not a copy
    of the whole matrix."""

    def __init__(self, dim: int, capacity: int = 64) -> None:
        self.matrix = np.zeros((capacity, dim), np.float32)
        self.expiry_ms = np.zeros(capacity)
        self.alive = np.zeros(capacity, bool)
        self.model_codes = np.zeros(capacity, np.int32)
        self.ids: list[str] = []
        self.queries: list[str] = []
        self.models: list[str] = []
        self.row_of: dict[str, int] = {}
        self.codes: dict[str, int] = {}
        self.dead = 0

    def __len__(self) -> int:
        return len(self.row_of)

    def vector(self, entry_id: str) -> np.ndarray | None:
        row = self.row_of.get(entry_id)
        return None if row is None else self.matrix[row]

    def add(
        self, entry_id: str, query: str, model: str, expiry_ms: float, vector: np.ndarray
    ) -> None:
        if entry_id in self.row_of:
            return
        row = len(self.ids)
        if row == len(self.alive):
            self._resize(2 * row)
        self.matrix[row] = vector
        self.expiry_ms[row] = expiry_ms
        self.alive[row] = True
        self.model_codes[row] = self.codes.setdefault(model, len(self.codes))
        self.ids.append(entry_id)
        self.queries.append(query)
        self.models.append(model)
        self.row_of[entry_id] = row

    def remove(self, entry_id: str) -> None:
        row = self.row_of.pop(entry_id, None)
        if row is None:
            return
        self.alive[row] = False
        self.dead += 1
        if self.dead > max(64, len(self.ids) // 4):
            self._resize(max(64, 2 * len(self.row_of)))

    def _resize(self, capacity: int) -> None:
        """Copy the live rows (in order) into arrays of `capacity` rows."""
        keep = np.flatnonzero(self.alive[: len(self.ids)])
        matrix = np.zeros((capacity, self.matrix.shape[1]), np.float32)
        matrix[: len(keep)] = self.matrix[keep]
        self.matrix = matrix
        for name in ("expiry_ms", "alive", "model_codes"):
            old = getattr(self, name)
            new = np.zeros(capacity, old.dtype)
            new[: len(keep)] = old[keep]
            setattr(self, name, new)
        self.ids = [self.ids[r] for r in keep]
        self.queries = [self.queries[r] for r in keep]
        self.models = [self.models[r] for r in keep]
        self.row_of = {entry_id: row for row, entry_id in enumerate(self.ids)}
        self.dead = 0

    def usable(self, now_ms: float, model: str) -> np.ndarray:
        """Rows alive, unexpired and (when `model` is set) of that model."""
        n = len(self.ids)
        mask = self.alive[:n] & (self.expiry_ms[:n] > now_ms)
        if model:
            mask &= self.model_codes[:n] == self.codes.get(model, -1)
        return mask
