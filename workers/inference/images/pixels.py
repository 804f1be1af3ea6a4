"""Pixel tensors for a request: from the worker's image cache, else from the blob store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from runtime.blobs import BlobStore
from schemas.events import ImageInput
from workers.inference.engines.engine import EngineError
from workers.inference.images.image_cache import ImageCache
from workers.runtime.retry import retry_transient
from workers.runtime.tensors import tensor_from_bytes


class PixelLoader:
    def __init__(self, blobs: BlobStore, cache: ImageCache) -> None:
        self.blobs = blobs
        self.cache = cache

    async def load(self, images: Sequence[ImageInput], owner: str) -> list[np.ndarray]:
        """Tensors in the order of `images`; a tensor that expired is a clear error."""
        pixels = []
        for image in images:
            tensor = self.cache.get(image.tensor_key)
            if tensor is None:
                key = image.tensor_key
                raw = await retry_transient("loading pixels", lambda k=key: self.blobs.get(k))
                if raw is None:
                    raise EngineError(
                        "an image of this turn expired before it was answered; send it again",
                        code="media_missing",
                    )
                tensor = await asyncio.to_thread(tensor_from_bytes, raw)
                self.cache.put(image.tensor_key, tensor, owner)
            pixels.append(tensor)
        return pixels
