"""Images of a turn → pixel tensors in the blob store, keyed by content and geometry.

An inline image is known by its sha256 before any work: when its tensor is already stored
(the same picture sent again, by anyone), decoding is skipped — the first layer of the
encoder cache, counted in `stats`. URL images are fetched first (SSRF-safe, bounded), then
handled the same way.

With an image screen, the detector looks at each image as the vision tower will see it (the
letterboxed square), in the same thread as the resize; its screening is stored in the
tensor's meta, so a picture sent again is not looked at again: its stored scores are judged
again with today's policy. A meta stored without a screening (screening was off then, or
the detector failed) is not reused while the screen is on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from moderation.image_screen import ImageScreen
from runtime.blobs import BlobStore, sha256_hex
from runtime.settings import Settings
from schemas.events import ImageInput, MediaRef, Screening
from workers.preprocess.fetch import FetchLimits, SafeFetcher
from workers.preprocess.images import ImageLimits, ProcessedImage, preprocess_image
from workers.runtime.retry import retry_transient
from workers.runtime.tensors import tensor_to_bytes

_meta_decoder = msgspec.json.Decoder(ImageInput)


@dataclass
class VisionStats:
    images: int = 0
    tensor_hits: int = 0  # tensors found already stored: decoding skipped

    @property
    def hit_rate(self) -> float:
        return self.tensor_hits / self.images if self.images else 0.0


@dataclass
class VisionPipeline:
    limits: ImageLimits
    fetcher: SafeFetcher
    blobs: BlobStore
    ttl_s: int
    screen: ImageScreen | None = None  # None: pixels are not screened
    stats: VisionStats = field(default_factory=VisionStats)

    @classmethod
    def from_settings(
        cls, settings: Settings, blobs: BlobStore, screen: ImageScreen | None = None
    ) -> VisionPipeline:
        limits = ImageLimits(
            max_bytes=settings.max_media_bytes,
            max_pixels=settings.max_image_pixels,
            target=settings.image_size,
            patch=settings.image_patch,
        )
        fetch_limits = FetchLimits(
            max_bytes=settings.max_media_bytes,
            total_s=settings.fetch_timeout_s,
            max_redirects=settings.fetch_max_redirects,
        )
        return cls(limits, SafeFetcher(fetch_limits), blobs, settings.media_ttl_s, screen)

    def tensor_key(self, sha256: str) -> str:
        """Same picture, same geometry → same tensor; another geometry is another tensor."""
        return f"px:{self.limits.target}:{self.limits.patch}:{sha256}"

    async def prepare(
        self, ref: MediaRef, load: Callable[[MediaRef], Awaitable[bytes]]
    ) -> ImageInput:
        self.stats.images += 1
        if ref.url:
            data = (await self.fetcher.fetch(ref.url)).data
            sha256 = sha256_hex(data)
        else:
            data, sha256 = None, ref.sha256
        key = self.tensor_key(sha256)
        if data is None:
            stored = await retry_transient("reading tensors", lambda: self.blobs.get(key + ":meta"))
            if stored is not None:
                known = _meta_decoder.decode(stored)
                if self.screen is None:
                    self.stats.tensor_hits += 1
                    return msgspec.structs.replace(known, cached=True)
                if self.screen.reusable(known.screening):
                    self.stats.tensor_hits += 1
                    seen = self.screen.rejudge(known.screening)  # type: ignore[arg-type]
                    return msgspec.structs.replace(known, screening=seen, cached=True)
            data = await load(ref)
        image, screening = await asyncio.to_thread(self._process, data)
        prepared = ImageInput(
            sha256=sha256,
            tensor_key=key,
            width=image.width,
            height=image.height,
            num_patches=image.num_patches,
            screening=screening,
        )
        tensor = tensor_to_bytes(image.pixel_values)
        meta = msgspec.json.encode(prepared)
        for name, blob in ((key, tensor), (key + ":meta", meta)):  # meta last: it marks done
            await retry_transient(
                "storing the tensor",
                functools.partial(self.blobs.put, name, blob, ttl_s=self.ttl_s),
            )
        return prepared

    def _process(self, data: bytes) -> tuple[ProcessedImage, Screening | None]:
        image = preprocess_image(data, self.limits)
        if self.screen is None or image.view is None:
            return image, None
        return image, self.screen.screen(image.view)

    async def aclose(self) -> None:
        await self.fetcher.aclose()
