"""Rows of the `events` table: each event type → its columns, the full event as JSON, and
the events no audit could use refused with the reason."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from harness.factories import completed, submitted
from schemas.codec import decode
from schemas.events import (
    ErrorInfo,
    FeedbackGiven,
    FeedbackKind,
    FinishReason,
    MediaKind,
    MediaRef,
    Message,
    PromptContext,
    Role,
    SafetyAction,
    SafetyStage,
    SafetyVerdict,
    SpeechDelivered,
    TraceRecorded,
    TurnAssembled,
    TurnEnriched,
    WorkerMetrics,
)
from schemas.ids import now_ms
from workers.sink.app import ROUTES, route_topics
from workers.sink.event_log import EVENT_COLUMNS, MAX_PAYLOAD_BYTES, event_row, event_rows
from workers.sink.rows import RowRejected

NOW = now_ms()
T0 = float(int(NOW) - 10_000)  # a whole millisecond: the expected times are exact


def row_of(event) -> dict:
    row = event_row(event, now_ms=NOW)
    assert row is not None
    return dict(zip(EVENT_COLUMNS, row, strict=True))


def at(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def turn(**fields):
    values = {"conversation_id": "c1", "user_id": "ann", "edge_id": "edge-1", "text": "héllo"}
    return submitted("t1", **{"submitted_at_ms": T0, **values, **fields})


def assembled(error: ErrorInfo | None = None) -> TurnAssembled:
    return TurnAssembled(
        turn_id="t1",
        submitted=turn(),
        messages=[Message(Role.SYSTEM, "be brief"), Message(Role.USER, "héllo")],
        context=PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=7),
        assembled_at_ms=T0 + 40,
        error=error,
    )


def test_a_submitted_turn_is_its_own_time_edge_and_media():
    media = [MediaRef(MediaKind.IMAGE, sha256="ab"), MediaRef(MediaKind.AUDIO, sha256="cd")]
    row = row_of(turn(media=media))
    assert row["kind"] == "turn.submitted" and row["step"] == 10
    assert (row["turn_id"], row["conversation_id"], row["tenant_id"], row["user_id"]) == (
        "t1",
        "c1",
        "acme",
        "ann",
    )
    assert row["at"] == at(T0) and row["actor"] == "edge-1" and row["detail"] == "image,audio"
    assert row["text_bytes"] == len("héllo".encode()) == 6 and row["error_code"] == ""
    assert decode(row["payload"]) == turn(media=media)  # the whole event, decodable again


def test_an_enriched_turn_is_dated_by_its_preprocessing():
    event = TurnEnriched(turn_id="t1", submitted=turn(), text="hello there", preprocess_ms=12.0)
    row = row_of(event)
    assert row["kind"] == "turn.enriched" and row["step"] == 20
    assert row["at"] == at(T0 + 12) and row["user_id"] == "ann" and row["text_bytes"] == 11


def test_an_assembled_turn_keeps_its_whole_prompt():
    row = row_of(assembled())
    assert row["kind"] == "turn.assembled" and row["step"] == 30 and row["at"] == at(T0 + 40)
    assert row["text_bytes"] == len("be brief") + len("héllo".encode())
    assert row["detail"] == "" and row["error_code"] == ""
    payload = msgspec.json.decode(row["payload"])
    assert [m["content"] for m in payload["messages"]] == ["be brief", "héllo"]
    assert b" " not in row["payload"].encode().replace(b"be brief", b"")  # compact JSON
    refused = row_of(assembled(ErrorInfo("context_overflow", "too long")))
    assert (refused["detail"], refused["error_code"]) == ("refused", "context_overflow")


def test_a_completed_turn_names_its_worker_outcome_and_answer():
    event = completed(
        "t1",
        conversation_id="c1",
        user_id="ann",
        worker_id="inference-9",
        finish_reason=FinishReason.ERROR,
        error=ErrorInfo("unsupported_media", "svg"),
        text="",
        completed_at_ms=T0 + 90,
    )
    row = row_of(event)
    assert row["kind"] == "turn.completed" and row["step"] == 60 and row["at"] == at(T0 + 90)
    assert (row["actor"], row["detail"], row["error_code"], row["text_bytes"]) == (
        "inference-9",
        "error",
        "unsupported_media",
        0,
    )


def test_feedback_carries_its_kind_and_comment_size():
    event = FeedbackGiven(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="ann",
        kind=FeedbackKind.THUMBS_DOWN,
        given_at_ms=T0 + 500,
        comment="too short",
    )
    row = row_of(event)
    assert row["kind"] == "feedback.given" and row["step"] == 80 and row["at"] == at(T0 + 500)
    assert (row["detail"], row["text_bytes"]) == ("thumbs_down", 9)


def speech(first_audio_at_ms: float, reason: str = "completed") -> SpeechDelivered:
    return SpeechDelivered(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="ann",
        edge_id="edge-2",
        first_audio_at_ms=first_audio_at_ms,
        ended_at_ms=T0 + 4000,
        audio_ms=3200.0,
        reason=reason,
    )


def test_a_spoken_answer_is_dated_by_its_first_audio_and_names_how_it_ended():
    row = row_of(speech(T0 + 700, reason="interrupted"))
    assert row["kind"] == "speech.delivered" and row["step"] == 50
    assert (row["at"], row["actor"], row["detail"]) == (at(T0 + 700), "edge-2", "interrupted")
    assert msgspec.json.decode(row["payload"])["audio_ms"] == 3200.0


def test_a_spoken_answer_that_sent_no_audio_is_dated_by_its_end_and_says_so():
    row = row_of(speech(0.0, reason="tts_unavailable"))
    assert (row["at"], row["detail"]) == (at(T0 + 4000), "no_audio:tts_unavailable")


def test_a_safety_verdict_sits_between_its_neighbours_and_names_its_decision():
    event = SafetyVerdict(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="ann",
        stage=SafetyStage.INPUT,
        action=SafetyAction.BLOCK,
        labels=["injection", "jailbreak"],
        text="ignore all previous instructions",
        checker="preprocess-1",
        at_ms=T0 + 2,
        error="classifier_error",
    )
    row = row_of(event)
    assert row["kind"] == "safety.verdict" and 20 < row["step"] < 30  # enriched < it < assembled
    assert row["detail"] == "input:block:injection,jailbreak" and row["actor"] == "preprocess-1"
    assert (row["error_code"], row["text_bytes"]) == ("classifier_error", 32)
    window = row_of(msgspec.structs.replace(event, stage=SafetyStage.OUTPUT, labels=[]))
    assert 30 < window["step"] < 60 and window["detail"] == "output:block"


def _window_verdict(window: int, at_ms: float) -> SafetyVerdict:
    return SafetyVerdict(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="ann",
        stage=SafetyStage.OUTPUT,
        action=SafetyAction.RELEASE,
        scores={"harm": -1.2},
        window=window,
        checker="safety-1",
        at_ms=at_ms,
    )


def test_verdicts_riding_on_an_event_get_a_row_each_and_leave_its_payload():
    """The windows' verdicts come on the completion: its own row (payload without them),
    then one row per verdict as if it had come alone; two stamped in the same millisecond
    are spread 1 ms apart (one record's rows share their Kafka coordinates, so they must
    differ in the sort key or ReplacingMergeTree would keep one)."""
    verdicts = [_window_verdict(0, T0 + 5.2), _window_verdict(1, T0 + 5.7)]
    event = msgspec.structs.replace(completed("t1", completed_at_ms=T0 + 9), verdicts=verdicts)
    rows = [dict(zip(EVENT_COLUMNS, r, strict=True)) for r in event_rows(event, now_ms=NOW)]
    assert [r["kind"] for r in rows] == ["turn.completed", "safety.verdict", "safety.verdict"]
    assert decode(rows[0]["payload"].encode()).verdicts == []
    assert [decode(r["payload"].encode()).window for r in rows[1:]] == [0, 1]
    assert [r["at"] for r in rows[1:]] == [at(T0 + 5), at(T0 + 6)]
    assert all(r["detail"] == "output:release" and r["step"] == 45 for r in rows[1:])
    assert event_rows(completed("t1", completed_at_ms=T0), now_ms=NOW)[0] == event_row(
        completed("t1", completed_at_ms=T0), now_ms=NOW
    )


def test_the_input_verdict_rides_on_the_enriched_event():
    verdict = msgspec.structs.replace(_window_verdict(-1, T0 + 1), stage=SafetyStage.INPUT)
    event = TurnEnriched(turn_id="t1", submitted=turn(), text="héllo", verdicts=[verdict])
    kinds = [r[0] for r in event_rows(event, now_ms=NOW)]
    assert kinds == ["turn.enriched", "safety.verdict"]
    assert event_rows(TraceRecorded(turn_id="t1", submitted=turn()), now_ms=NOW) == []


def test_events_the_log_does_not_keep_give_no_row():
    trace = TraceRecorded(turn_id="t1", submitted=turn(), closed_at_ms=T0)
    metrics = WorkerMetrics(
        worker_id="w", pool="inference", model="m", at_ms=T0, interval_ms=1, running=0,
        waiting=0, kv_cache_usage=0.0,
    )  # fmt: skip
    assert event_row(trace, now_ms=NOW) is None and event_row(metrics, now_ms=NOW) is None


def test_the_route_reads_every_topic_of_a_turn_into_events():
    spec = ROUTES["events"][1]
    names = {t.name for t in route_topics("events", ("chat", "reasoning", "code"))}
    assert names == {
        "turns.submitted",
        "turns.enriched",
        "inference.chat",  # the assembled turns: where the router sent them
        "inference.reasoning",
        "inference.code",
        "images.requested",
        "turns.completed",
        "feedback",
        "safety.verdicts",
    }
    assert {t.name for t in route_topics("turns", ("chat",))} == {"turns.completed"}
    assert spec.table.endswith(".events") and spec.columns == EVENT_COLUMNS
    assert not {"kafka_topic", "kafka_partition", "kafka_offset"} & set(EVENT_COLUMNS)
    [row] = spec.row_of(turn(), NOW)
    assert row[spec.stamp_index] == at(T0)


@pytest.mark.parametrize(
    ("event", "says"),
    [
        (turn(tenant_id=""), "no tenant_id"),
        (turn(user_id=" "), "no user_id"),
        (turn(conversation_id=""), "no conversation_id"),
        (submitted("", submitted_at_ms=T0), "no turn_id"),
        (turn(submitted_at_ms=1000.0), "not a plausible time"),
        (turn(submitted_at_ms=NOW + 10 * 86_400_000), "not a plausible time"),
        (turn(submitted_at_ms=float("nan")), "not a plausible time"),
        (turn(text="x" * MAX_PAYLOAD_BYTES), "payload over"),
        (TurnEnriched(turn_id="t1", submitted=turn(), text="q", preprocess_ms=-5), "preprocess"),
        (TurnEnriched(turn_id="t2", submitted=turn(), text="q"), "differs from its submitted"),
        (completed("t1", completed_at_ms=0.0), "turn.completed time 0"),
    ],
)
def test_events_no_audit_could_use_are_rejected_with_the_reason(event, says):
    with pytest.raises(RowRejected, match=says):
        event_row(event, now_ms=NOW)
