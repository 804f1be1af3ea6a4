"""The engine interface the inference service depends on (the shape of vLLM's EngineClient).

The service never imports vLLM: `vllm_engine.VllmEngine` implements this protocol for real,
`fake_engine.FakeEngine` deterministically for tests and pipeline benchmarks. Cancelling the
consumer of `stream()` aborts the request inside the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from schemas.events import DecodingParams, FinishReason, ImageInput, Message
from workers.inference.engines.engine_profile import EngineProfile
from workers.inference.engines.engine_stats import EngineSnapshot
from workers.inference.errors import InferenceError


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """`images` are referenced by `<image_N>` placeholders in the last user message, in
    order; `pixels` holds their pixel tensors (numpy, 3xHxW, normalised), loaded by the
    service so engines never touch the blob store."""

    request_id: str
    messages: Sequence[Message]
    decoding: DecodingParams
    images: Sequence[ImageInput] = ()
    pixels: Sequence[Any] = ()
    priority: int = 0  # the tenant tier's: higher is scheduled first when the engine queues
    # whose cached prompt blocks this request may reuse ("": anyone's): the tenant, so one
    # tenant cannot learn another's prompts from how fast a shared prefix comes back
    cache_salt: str = ""


@dataclass(frozen=True, slots=True)
class GenerationDelta:
    """New text since the previous delta; the last one has `finish_reason` set."""

    text: str
    new_tokens: int
    prompt_tokens: int
    cached_prompt_tokens: int = 0
    finish_reason: FinishReason | None = None


class EngineError(InferenceError, RuntimeError):
    """The engine failed a request (bad prompt, overload, crash). `retryable` advises callers."""

    code = "engine_error"

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False):
        super().__init__(message)
        self.code = code or self.code
        self.retryable = retryable


class Engine(Protocol):
    """What the inference service needs from an engine."""

    model_name: str
    accepts_images: bool  # a text-only model refuses image turns with `images_unsupported`

    def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Generate; closing or cancelling the iterator aborts the request in the engine."""
        ...

    def snapshot(self) -> EngineSnapshot:
        """The engine's load now (gauges) and its counters since it started; cheap, never
        blocks (the worker's metrics read it every few hundred ms)."""
        ...

    async def close(self) -> None: ...


def options_tag(engine: object) -> str:
    """The engine's options as traces record them. An engine built from an `EngineProfile`
    exposes the profile in force as `profile` (the vLLM engine; any backend may); engines
    without one (the fake) are recorded with ""."""
    profile = getattr(engine, "profile", None)
    return profile.tag() if isinstance(profile, EngineProfile) else ""
