"""A deterministic engine: answers by echoing the question word by word at a fixed rate.

For unit tests of the service logic and for benchmarks that measure the pipeline alone
(tokens arrive at a known cadence, so any extra delay is the pipeline's).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from schemas.events import FinishReason, Role
from workers.inference.engine import EngineError, GenerationDelta, GenerationRequest
from workers.inference.engine_stats import EngineSnapshot


def fake_answer(request: GenerationRequest) -> list[str]:
    """The tokens the fake engine answers with: 'You said: <last user text>' plus history size
    (and the images it was given, so tests see them arrive)."""
    last_user = next((m.content for m in reversed(request.messages) if m.role == Role.USER), "")
    turns = sum(1 for m in request.messages if m.role == Role.USER)
    seen = f", {len(request.images)} images" if request.images else ""
    words = f"You said: {last_user} (turn {turns}{seen})".split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class FakeEngine:
    model_name = "fake-echo"
    accepts_images = True

    def __init__(
        self,
        token_interval_s: float = 0.02,
        fail_on: str | None = None,
        kv_capacity_tokens: int = 4096,
    ) -> None:
        self.token_interval_s = token_interval_s
        self.fail_on = fail_on  # a user text that makes the engine raise (tests the error path)
        self.requests: list[str] = []  # every request id it was asked to generate
        self.aborted: list[str] = []
        self.active = 0
        # Its own books, reported by `snapshot`: a stream holds its prompt and answer tokens
        # in a pretend KV cache of `kv_capacity_tokens`.
        self.kv_capacity_tokens = kv_capacity_tokens
        self.kv_tokens = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        tokens = fake_answer(request)
        prompt_tokens = sum(len(m.content.split()) + 4 for m in request.messages)
        limit = request.decoding.max_tokens
        self.requests.append(request.request_id)
        self.active += 1
        self.prompt_tokens += prompt_tokens
        held = prompt_tokens
        self.kv_tokens += held
        try:
            for i, token in enumerate(tokens[:limit]):
                await asyncio.sleep(self.token_interval_s)
                if self.fail_on is not None and self.fail_on in request.messages[-1].content:
                    raise EngineError("fake engine failure", code="engine_error")
                self.generation_tokens += 1
                self.kv_tokens += 1
                held += 1
                last = i == min(len(tokens), limit) - 1
                reason = None
                if last:
                    reason = FinishReason.STOP if len(tokens) <= limit else FinishReason.LENGTH
                yield GenerationDelta(token, 1, prompt_tokens, 0, reason)
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request.request_id)
            raise
        finally:
            self.active -= 1
            self.kv_tokens -= held

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            running=self.active,
            waiting=0,  # every stream runs at once
            kv_cache_usage=min(1.0, self.kv_tokens / self.kv_capacity_tokens),
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
        )

    async def close(self) -> None:
        return None
