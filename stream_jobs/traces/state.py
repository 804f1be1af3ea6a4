"""What the traces job knows about a turn until its trace is complete, and the join (pure).

A turn's events arrive on four topics (all keyed by conversation, so on one partition):
submitted, enriched (preprocessing time), assembled (how the prompt was built, without the
prompt itself), completed. The trace is emitted once both ends are known, whatever order
they came in; a duplicate of any event changes nothing. A turn an inference worker ended
was assembled first, so its trace also waits for `turn.assembled` (which carries the
preprocessing time and screening on): the topics are read in no fixed order, and a trace
emitted early would lose them. `close` ends the wait when that event never comes.
"""

from __future__ import annotations

import msgspec

from schemas.events import (
    AnyEvent,
    PromptContext,
    Route,
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
    route: Route | None = None


def joins(event: AnyEvent) -> bool:
    """Whether the trace is made of this kind of event (others on its topics, such as a
    barge-in's truncation, are kept by the events log instead)."""
    return isinstance(event, TurnSubmitted | TurnEnriched | TurnAssembled | TurnCompleted)


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
            pending.route = event.route
            pending.preprocess_ms = pending.preprocess_ms or event.preprocess_ms
            pending.screening = pending.screening or event.screening
            pending.submitted = pending.submitted or event.submitted
        case TurnCompleted():
            pending.completed = without_verdicts(event)
            pending.screening = event.screening or pending.screening
        case _:
            return None
    submitted, completed = pending.submitted, pending.completed
    if submitted is None or completed is None or not ready(pending):
        return None
    return TraceRecorded(
        turn_id=submitted.turn_id,
        submitted=submitted,
        completed=completed,
        preprocess_ms=pending.preprocess_ms,
        context=pending.context,
        screening=pending.screening,
        route=pending.route,
    )


def ready(pending: PendingTrace) -> bool:
    """Both ends known, and the assembly too when the turn was assembled."""
    if pending.submitted is None or pending.completed is None:
        return False
    return pending.context is not None or not pending.completed.assembled


def awaiting_assembly(pending: PendingTrace) -> bool:
    """Completed and submitted, only the assembly missing: closed after a short grace."""
    return pending.submitted is not None and pending.completed is not None and not ready(pending)


def timed_out(pending: PendingTrace, turn_id: str, now_ms: float) -> TraceRecorded | None:
    """The trace of a turn closed by the clock: completed but its assembly never came (the
    trace lacks the prompt context), or never completed (`timed_out`). None when not even
    its submission was seen: there is nothing to record."""
    if pending.submitted is None:
        return None
    return TraceRecorded(
        turn_id=turn_id,
        submitted=pending.submitted,
        completed=pending.completed,
        closed_at_ms=0.0 if pending.completed is not None else now_ms,
        preprocess_ms=pending.preprocess_ms,
        context=pending.context,
        screening=pending.screening,
        route=pending.route,
    )


def expired(opened: dict[bytes, float], now_ms: float, timeout_ms: float) -> list[bytes]:
    """Keys first seen longer than `timeout_ms` ago."""
    return [key for key, first_seen in opened.items() if now_ms - first_seen >= timeout_ms]


def without_verdicts(completed: TurnCompleted) -> TurnCompleted:
    """The completion as the trace keeps it: the verdicts it carried are in the events log
    (a row each) and counted in its `output_safety`; the trace does not repeat them."""
    if not completed.verdicts:
        return completed
    return msgspec.structs.replace(completed, verdicts=[])
