"""The inference worker's error root: the engine failing a request, a bad batching setup."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class InferenceError(TurnstreamError):
    code = "inference_error"
