"""Events → rows of ClickHouse `events` (migration 0007): one row per event of a turn, the
audit log behind the wide `traces` row (pure).

Generic over event types: each type only says who the turn belongs to, when the event
happened and a few audit facts (`_FACTS`); the ids, time and size checks, the tag and the
compact JSON payload are the same for all. A later event type (a routing decision, a safety
verdict) joins the log by adding its facts function here and its topic to the sink's route.
Verdicts that ride on another event (`verdicts`: the input screen's on `turn.enriched`, the
output windows' on `turn.completed`) get a row each, as if they had come on their own: one
record, several rows (`event_rows`). The Kafka source columns (`kafka_topic`,
`kafka_partition`, `kafka_offset`) are the sink's: they are not built here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from schemas.codec import encode
from schemas.events import (
    Event,
    FeedbackGiven,
    SafetyStage,
    SafetyVerdict,
    SpeechDelivered,
    TurnAssembled,
    TurnCompleted,
    TurnEnriched,
    TurnSubmitted,
    TurnTruncated,
)
from workers.sink.rows import RowRejected, plausible_time

EVENT_COLUMNS = (
    "kind",
    "turn_id",
    "conversation_id",
    "tenant_id",
    "user_id",
    "at",
    "step",
    "actor",
    "detail",
    "error_code",
    "text_bytes",
    "payload",
)
# The assembled event carries the whole prompt (what audits read): kept, up to a size no
# context window needs; a bigger one is a bug upstream and would bloat every scan.
MAX_PAYLOAD_BYTES = 1024 * 1024
NO_AUDIO = "no_audio"  # a spoken answer's delivery that sent no audio (its detail's prefix)


@dataclass(frozen=True, slots=True)
class Facts:
    """What one event type contributes to its row; the rest is generic.

    `step` is the event's place in a turn's life: it orders events stamped in the same
    millisecond (an enriched time is the submitted time plus the preprocessing time, often
    under a millisecond). Gaps leave room for the event types still to come."""

    conversation_id: str
    tenant_id: str
    user_id: str
    at_ms: float
    step: int
    actor: str = ""  # the edge or worker that produced it, where the event says
    detail: str = ""  # a short per-type label: finish reason, feedback kind
    error_code: str = ""
    text_bytes: int = 0  # UTF-8 size of the event's main text (query, prompt, answer, comment)


def _utf8(text: str) -> int:
    return len(text.encode())


def _submitted(e: TurnSubmitted) -> Facts:
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.submitted_at_ms,
        step=10,
        actor=e.edge_id,
        detail=",".join(str(m.kind) for m in e.media),
        text_bytes=_utf8(e.text),
    )


def _enriched(e: TurnEnriched) -> Facts:
    if not e.preprocess_ms >= 0:  # NaN too: the event's time is derived from it
        raise RowRejected(f"preprocess_ms {e.preprocess_ms} is not plausible")
    s = e.submitted
    at_ms = s.submitted_at_ms + e.preprocess_ms  # the event carries no time of its own
    return Facts(
        s.conversation_id, s.tenant_id, s.user_id, at_ms, step=20, text_bytes=_utf8(e.text)
    )


def _assembled(e: TurnAssembled) -> Facts:
    s = e.submitted
    return Facts(
        s.conversation_id,
        s.tenant_id,
        s.user_id,
        e.assembled_at_ms,
        step=30,
        detail="refused" if e.error is not None else "",
        error_code=e.error.code if e.error is not None else "",
        text_bytes=sum(_utf8(m.content) for m in e.messages),
    )


def _completed(e: TurnCompleted) -> Facts:
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.completed_at_ms,
        step=60,
        actor=e.worker_id,
        detail=str(e.finish_reason),
        error_code=e.error.code if e.error is not None else "",
        text_bytes=_utf8(e.text),
    )


def _feedback(e: FeedbackGiven) -> Facts:
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.given_at_ms,
        step=80,
        detail=str(e.kind),
        text_bytes=_utf8(e.comment),
    )


# input screening judges the preprocessed text (after enriched, before assembled); output
# windows fall between assembled and completed; audits after completion
_SAFETY_STEPS = {SafetyStage.INPUT: 25, SafetyStage.OUTPUT: 45, SafetyStage.AUDIT: 70}


def _safety(e: SafetyVerdict) -> Facts:
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.at_ms,
        step=_SAFETY_STEPS[e.stage],
        actor=e.checker,
        detail=f"{e.stage}:{e.action}" + (f":{','.join(e.labels)}" if e.labels else ""),
        error_code=e.error,
        text_bytes=_utf8(e.text),
    )


def _truncated(e: TurnTruncated) -> Facts:
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.truncated_at_ms,
        step=90,
        detail=f"{e.reason}:{e.truncation.audio_end_ms:.0f}ms",
        text_bytes=_utf8(e.truncation.text),
    )


def _delivered(e: SpeechDelivered) -> Facts:
    """At its first audio (the speech hops' end), detail how it ended; when none went out,
    at its end, detail `no_audio:<how>` (the view `speech_hops` skips those)."""
    sent = e.first_audio_at_ms > 0
    return Facts(
        e.conversation_id,
        e.tenant_id,
        e.user_id,
        e.first_audio_at_ms if sent else e.ended_at_ms,
        step=50,
        actor=e.edge_id,
        detail=e.reason if sent else f"{NO_AUDIO}:{e.reason}",
    )


_FACTS: dict[type[Event], Callable[[Any], Facts]] = {
    TurnSubmitted: _submitted,
    TurnEnriched: _enriched,
    TurnAssembled: _assembled,
    TurnCompleted: _completed,
    FeedbackGiven: _feedback,
    SafetyVerdict: _safety,
    TurnTruncated: _truncated,
    SpeechDelivered: _delivered,
}


def _inner_turn_id(event: Event) -> str | None:
    submitted = getattr(event, "submitted", None)
    return submitted.turn_id if isinstance(submitted, TurnSubmitted) else None


def event_rows(event: Event, *, now_ms: float) -> list[tuple]:
    """The `events` rows of one record: its event's, then one per verdict it carries (its
    own row's payload leaves them out: each is in its row). Rows of one record share its
    Kafka coordinates, so they must differ in the table's sort key: verdicts stamped in the
    same millisecond are spread 1 ms apart, in the order they came."""
    carried: list[SafetyVerdict] = list(getattr(event, "verdicts", ()))
    if carried:
        event = msgspec.structs.replace(event, verdicts=[])
    row = event_row(event, now_ms=now_ms)
    rows = [] if row is None else [row]
    last_ms = float("-inf")
    for verdict in carried:
        at_ms = max(float(int(verdict.at_ms)), last_ms + 1)
        last_ms = at_ms
        verdict_row = event_row(msgspec.structs.replace(verdict, at_ms=at_ms), now_ms=now_ms)
        if verdict_row is not None:
            rows.append(verdict_row)
    return rows


def event_row(event: Event, *, now_ms: float) -> tuple | None:
    """The `events` row of one event (in `EVENT_COLUMNS` order); None for a type the log
    does not keep. Raises `RowRejected` for an event no audit could use: missing ids, an
    implausible time, a payload over `MAX_PAYLOAD_BYTES`."""
    facts_of = _FACTS.get(type(event))
    if facts_of is None:
        return None
    facts = facts_of(event)
    kind = type(event).__struct_config__.tag
    problems = [
        f"no {name}"
        for name, value in (
            ("turn_id", event.turn_id),
            ("conversation_id", facts.conversation_id),
            ("tenant_id", facts.tenant_id),
            ("user_id", facts.user_id),
        )
        if not value.strip()
    ]
    inner = _inner_turn_id(event)
    if inner is not None and inner != event.turn_id:
        problems.append(f"turn_id {event.turn_id!r} differs from its submitted turn's {inner!r}")
    if not plausible_time(facts.at_ms, now_ms):
        problems.append(f"{kind} time {facts.at_ms:.0f} is not a plausible time")
    payload = encode(event)
    if len(payload) > MAX_PAYLOAD_BYTES:
        problems.append(f"payload over {MAX_PAYLOAD_BYTES} bytes ({len(payload)})")
    if problems:
        raise RowRejected("; ".join(problems))
    return (
        kind,
        event.turn_id,
        facts.conversation_id,
        facts.tenant_id,
        facts.user_id,
        datetime.fromtimestamp(facts.at_ms / 1000, tz=UTC),
        facts.step,
        facts.actor,
        facts.detail,
        facts.error_code,
        facts.text_bytes,
        payload.decode(),
    )
