"""Errors of image generation. Each carries the stable `code` the client sees in-band and
whether retrying could help (class defaults; an instance may override `retryable`).

ImageGenError           root of the tree                                 imagegen_error
├── ModelMissing        the model folder is missing or not a pipeline    imagegen_model_missing
├── GenerationFailed    the pipeline raised (out of memory, a bad step)  imagegen_failed
└── GenerationCancelled cancel, barge-in or shutdown stopped it          (finish: cancelled)
"""

from __future__ import annotations

from schemas.errors import TurnstreamError


class ImageGenError(TurnstreamError):
    code = "imagegen_error"
    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class ModelMissing(ImageGenError):
    code = "imagegen_model_missing"


class GenerationFailed(ImageGenError):
    code = "imagegen_failed"
    retryable = True


class GenerationCancelled(ImageGenError):
    """Raised from the pipeline's step callback: the generation stops at that step."""

    code = "cancelled"
