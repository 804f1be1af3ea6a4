"""What a turn has produced so far, and the completed event built from it (pure).

Kept apart from the service so timings, usage and finish logic are tested without a loop.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from schemas.events import (
    ErrorInfo,
    FinishReason,
    Timings,
    TurnAssembled,
    TurnCompleted,
    TurnSubmitted,
    Usage,
)
from workers.inference.engines.engine import GenerationDelta
from workers.inference.tool_stream import CallSplitter


@dataclass(slots=True)
class TurnProgress:
    turn: TurnSubmitted
    # the record the turn came in: its completion says how the prompt was built (the trace
    # reads it there); None only where a completion is not built (a replayed outcome)
    assembled: TurnAssembled | None = None
    attempt: str = field(default_factory=lambda: secrets.token_hex(4))
    started_at_ms: float | None = None
    first_token_at_ms: float | None = None
    last_token_at_ms: float | None = None
    gaps_ms: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0
    finish_reason: FinishReason | None = None
    published: int = 0  # relay chunks sent (a delta may be split into text and a tool call)
    # which pieces are tool calls (None: the turn's tools may not be called)
    calls: CallSplitter | None = None

    def next_seq(self) -> int:
        self.published += 1
        return self.published - 1

    def add(self, delta: GenerationDelta, now_ms: float) -> bool:
        """Record a delta; True when it carries text the client should see."""
        self.prompt_tokens = delta.prompt_tokens
        self.cached_prompt_tokens = delta.cached_prompt_tokens
        self.completion_tokens += delta.new_tokens
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if not delta.text:
            return False
        if self.first_token_at_ms is None:
            self.first_token_at_ms = now_ms
        else:
            assert self.last_token_at_ms is not None
            self.gaps_ms.append(round(now_ms - self.last_token_at_ms, 3))
        self.last_token_at_ms = now_ms
        self.pieces.append(delta.text)
        self.chunks += 1
        return True

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def completed(
        self,
        *,
        finish_reason: FinishReason,
        now_ms: float,
        model: str,
        worker_id: str,
        error: ErrorInfo | None = None,
        engine_options: str = "",
    ) -> TurnCompleted:
        submitted = self.turn.submitted_at_ms
        started = self.started_at_ms if self.started_at_ms is not None else now_ms
        ttft = None if self.first_token_at_ms is None else self.first_token_at_ms - submitted
        return TurnCompleted(
            turn_id=self.turn.turn_id,
            conversation_id=self.turn.conversation_id,
            tenant_id=self.turn.tenant_id,
            user_id=self.turn.user_id,
            finish_reason=finish_reason,
            text=self.text,
            usage=Usage(self.prompt_tokens, self.completion_tokens, self.cached_prompt_tokens),
            timings=Timings(
                queue_ms=round(started - submitted, 3),
                ttft_ms=None if ttft is None else round(ttft, 3),
                e2e_ms=round(now_ms - submitted, 3),
                itl_ms=self.gaps_ms,
            ),
            model=model,
            worker_id=worker_id,
            completed_at_ms=now_ms,
            error=error,
            assembled=True,
            context=None if self.assembled is None else self.assembled.context,
            route=None if self.assembled is None else self.assembled.route,
            preprocess_ms=0.0 if self.assembled is None else self.assembled.preprocess_ms,
            engine_options=engine_options,
        )
