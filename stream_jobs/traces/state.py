"""What the traces job knows about a turn until its trace is complete, and the join (pure).

A turn's events arrive on three topics (all keyed by conversation, so on one partition):
submitted, enriched (preprocessing time, the input screen), completed (the answer, and, for
a turn an inference worker ended, how its prompt was assembled and routed: the worker copies
that from the `turn.assembled` it was given). The trace is emitted once both ends are known,
whatever order they came in; a duplicate of any event changes nothing.

Older completions did not carry the assembly: their `turn.assembled` came on a fourth topic,
so a completion with `assembled` set and no `context` still waits for it (replays of old
topics); `close` ends the wait when that event never comes.
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
    language: str = ""
    text_language: str = ""
    enriched_at_ms: float = 0.0
    image_cache_hits: int = 0


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
            pending.enriched_at_ms = event.enriched_at_ms
            pending.image_cache_hits = sum(1 for image in event.images if image.cached)
            pending.language = event.language or pending.language
            pending.text_language = event.text_language
            pending.screening = event.screening or pending.screening
            pending.submitted = pending.submitted or event.submitted
        case TurnAssembled():
            pending.context = event.context
            pending.language = pending.language or event.language
            pending.route = event.route
            pending.preprocess_ms = pending.preprocess_ms or event.preprocess_ms
            pending.screening = pending.screening or event.screening
            pending.submitted = pending.submitted or event.submitted
        case TurnCompleted():
            pending.completed = as_traced(event)
            pending.screening = event.screening or pending.screening
            pending.context = event.context or pending.context
            pending.route = event.route or pending.route
            pending.preprocess_ms = pending.preprocess_ms or event.preprocess_ms
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
        language=pending.language,
        text_language=pending.text_language,
        enriched_at_ms=pending.enriched_at_ms,
        image_cache_hits=pending.image_cache_hits,
    )


def ready(pending: PendingTrace) -> bool:
    """Both ends known, and the assembly too when the turn was assembled (on the completion
    since it carries it; from an older event's `turn.assembled` otherwise)."""
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
        language=pending.language,
        text_language=pending.text_language,
        enriched_at_ms=pending.enriched_at_ms,
        image_cache_hits=pending.image_cache_hits,
    )


def expired(opened: dict[bytes, float], now_ms: float, timeout_ms: float) -> list[bytes]:
    """Keys first seen longer than `timeout_ms` ago."""
    return [key for key, first_seen in opened.items() if now_ms - first_seen >= timeout_ms]


def as_traced(completed: TurnCompleted) -> TurnCompleted:
    """The completion as the trace keeps it, without what the trace holds elsewhere: the
    verdicts it carried are in the events log (a row each) and counted in its
    `output_safety`; how the turn was assembled is in the trace's own fields."""
    if not completed.verdicts and completed.context is None and completed.route is None:
        return completed
    return msgspec.structs.replace(
        completed, verdicts=[], context=None, route=None, preprocess_ms=0.0
    )
