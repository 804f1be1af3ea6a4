"""Pixel tensors of recent images, by content hash: LRU, with a quota per user (pure).

A repeated image (the same screenshot asked about again, a popular meme) skips the blob
store. Each entry is charged to the user who brought it in; a user over quota evicts their
own oldest entries, never anyone else's, so one hostile client cannot flush the cache for
everyone. Global pressure evicts the least recently used entry overall.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class _Entry:
    tensor: np.ndarray
    owner: str
    size: int


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class ImageCache:
    def __init__(self, *, max_bytes: int, per_user_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.per_user_bytes = min(per_user_bytes, max_bytes)
        self.stats = CacheStats()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._used = 0
        self._used_by: dict[str, int] = {}

    def get(self, key: str) -> np.ndarray | None:
        entry = self._entries.get(key)
        if entry is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return entry.tensor

    def put(self, key: str, tensor: np.ndarray, owner: str) -> None:
        size = int(tensor.nbytes)
        if key in self._entries or size > self.per_user_bytes:
            return
        while self._used_by.get(owner, 0) + size > self.per_user_bytes:
            self._evict(self._oldest_of(owner))
        while self._used + size > self.max_bytes:
            self._evict(next(iter(self._entries)))
        self._entries[key] = _Entry(tensor, owner, size)
        self._used += size
        self._used_by[owner] = self._used_by.get(owner, 0) + size

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def used_by(self, owner: str) -> int:
        return self._used_by.get(owner, 0)

    def _oldest_of(self, owner: str) -> str:
        return next(k for k, e in self._entries.items() if e.owner == owner)

    def _evict(self, key: str) -> None:
        entry = self._entries.pop(key)
        self._used -= entry.size
        self._used_by[entry.owner] -= entry.size
        if not self._used_by[entry.owner]:
            del self._used_by[entry.owner]
