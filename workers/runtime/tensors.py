"""Pixel tensors as blobs: the .npy encoding, shared by the preprocessor (writes) and the
inference worker (reads)."""

from __future__ import annotations

import io

import numpy as np


def tensor_to_bytes(tensor: np.ndarray) -> bytes:
    """The .npy encoding (dtype and shape included), for a content-addressed blob store."""
    buf = io.BytesIO()
    np.save(buf, tensor, allow_pickle=False)
    return buf.getvalue()


def tensor_from_bytes(data: bytes) -> np.ndarray:
    """Inverse of tensor_to_bytes; refuses pickled object arrays (a blob is not trusted code)."""
    return np.load(io.BytesIO(data), allow_pickle=False)
