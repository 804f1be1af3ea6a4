"""Valid events with sensible defaults, so a test states only what it is about."""

from __future__ import annotations

import uuid
from typing import Any

from schemas.events import (
    FinishReason,
    Timings,
    TurnCompleted,
    TurnEnriched,
    TurnSubmitted,
    Usage,
)


def submitted(turn_id: str = "t", **fields: Any) -> TurnSubmitted:
    values: dict[str, Any] = {
        "conversation_id": "c",
        "tenant_id": "acme",
        "user_id": "u",
        "edge_id": "e",
        "text": "q",
        "submitted_at_ms": 1000.0,
    }
    return TurnSubmitted(turn_id=turn_id, **{**values, **fields})


def completed(turn_id: str = "t", **fields: Any) -> TurnCompleted:
    values: dict[str, Any] = {
        "conversation_id": "c",
        "tenant_id": "acme",
        "user_id": "u",
        "finish_reason": FinishReason.STOP,
        "text": "Hello",
        "usage": Usage(5, 2),
        "timings": Timings(queue_ms=1, ttft_ms=2, e2e_ms=3),
        "model": "m",
        "worker_id": "w",
        "completed_at_ms": 1.0,
    }
    return TurnCompleted(turn_id=turn_id, **{**values, **fields})


def new_conversation_id() -> str:
    """A conversation nobody has used (tests share one namespace per session)."""
    return f"c-{uuid.uuid4().hex[:10]}"


def enriched(turn_id: str = "t", text: str = "q", **fields: Any) -> TurnEnriched:
    return TurnEnriched(
        turn_id=turn_id, submitted=submitted(turn_id, text=text), text=text, **fields
    )
