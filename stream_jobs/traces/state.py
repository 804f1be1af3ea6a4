"""What the traces job knows about a turn until its trace is complete, and the join (pure).

A turn's events arrive on four topics (all keyed by conversation, so on one partition):
submitted, enriched (preprocessing time), assembled (how the prompt was built, without the
prompt itself), completed. The trace is emitted once both ends are known, whatever order
they came in; a duplicate of any event changes nothing.
"""

from __future__ import annotations

import msgspec

from schemas.events import (
    AnyEvent,
    PromptContext,
    Screening,
    TraceRecorded,
    TurnAssembled,
    TurnCompleted,
    TurnEnriched,
    TurnSubmitted,
)


class PendingTrace(msgspec.Struct, forbid_unknown_fields=True):
    submitted: TurnSubmitted | None = None
    completed: TurnCompleted | None = None
    preprocess_ms: float = 0.0
    context: PromptContext | None = None
    screening: Screening | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(PendingTrace)


def encode_pending(pending: PendingTrace) -> bytes:
    return _encoder.encode(pending)


def decode_pending(raw: bytes | None) -> PendingTrace:
    return PendingTrace() if raw is None else _decoder.decode(raw)


def on_event(pending: PendingTrace, event: AnyEvent) -> TraceRecorded | None:
    """Fold one event in; the trace when the turn is complete (then the row can go)."""
    match event:
        case TurnSubmitted():
            pending.submitted = event
        case TurnEnriched():
            pending.preprocess_ms = event.preprocess_ms
            pending.screening = event.screening or pending.screening
            pending.submitted = pending.submitted or event.submitted
        case TurnAssembled():
            pending.context = event.context
            pending.submitted = pending.submitted or event.submitted
        case TurnCompleted():
            pending.completed = event
            pending.screening = event.screening or pending.screening
        case _:
            return None
    if pending.submitted is None or pending.completed is None:
        return None
    return TraceRecorded(
        turn_id=pending.submitted.turn_id,
        submitted=pending.submitted,
        completed=pending.completed,
        preprocess_ms=pending.preprocess_ms,
        context=pending.context,
        screening=pending.screening,
    )


def timed_out(pending: PendingTrace, turn_id: str, now_ms: float) -> TraceRecorded | None:
    """The trace of a turn whose completion never came (None when not even its submission
    was seen: there is nothing to record)."""
    if pending.submitted is None:
        return None
    return TraceRecorded(
        turn_id=turn_id,
        submitted=pending.submitted,
        closed_at_ms=now_ms,
        preprocess_ms=pending.preprocess_ms,
        context=pending.context,
        screening=pending.screening,
    )


def expired(opened: dict[bytes, float], now_ms: float, timeout_ms: float) -> list[bytes]:
    """Keys first seen longer than `timeout_ms` ago."""
    return [key for key, first_seen in opened.items() if now_ms - first_seen >= timeout_ms]
