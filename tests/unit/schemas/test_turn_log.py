"""The turn log's pure rules: which frames are logged, how positions read and order, and what
a resume tells the client for each shape of history."""

import pytest

from harness.factories import completed
from schemas.codec import encode
from schemas.errors import DecodeError
from schemas.events import InputTranscribed, SpeechAudio, TokenChunk, TurnStarted
from schemas.turn_log import (
    CURRENT_EPOCH,
    FINAL,
    NOT_LOGGED,
    START,
    LogPosition,
    decode_entries,
    decode_relay_message,
    log_kind,
    parse_entry_id,
    plan_resume,
    range_start,
)

P = LogPosition


def chunk(attempt: str = "a1", seq: int = 0) -> TokenChunk:
    return TokenChunk(turn_id="t", seq=seq, text="x", emitted_at_ms=1.0, attempt=attempt)


def test_log_kinds():
    assert log_kind(chunk("a1")) == "a:a1"
    assert log_kind(TurnStarted(turn_id="t", worker_id="w", model="m", attempt="a2")) == "a:a2"
    assert log_kind(chunk("")) == CURRENT_EPOCH
    assert log_kind(InputTranscribed(turn_id="t", text="hi", segments=[], audio_s=1)) == (
        CURRENT_EPOCH
    )
    assert log_kind(completed("t")) == FINAL
    audio = SpeechAudio(
        turn_id="t", attempt="a1", index=0, text="hi", char_start=0, sample_rate=16000
    )
    assert log_kind(audio) == NOT_LOGGED  # speech is live only


def test_positions_parse_and_order_like_the_log():
    assert parse_entry_id(b"2-15") == P(2, 15)
    assert parse_entry_id("0-1") == P(0, 1)
    assert P(1, 99) < P(2, 0) < P(2, 1)
    assert START < P(0, 1) < P(1, 0)


def test_range_starts_after_the_position():
    assert range_start(START) == "0-0"
    assert range_start(P(2, -1)) == "2-0"  # an epoch from its start
    assert range_start(P(1, 7)) == "(1-7"  # exclusive


@pytest.mark.parametrize(
    ("after", "first", "exists", "status", "position"),
    [
        (P(1, 4), P(1, 5), True, "resumed", P(1, 4)),  # follows on
        (P(1, 4), None, True, "resumed", P(1, 4)),  # nothing new yet: live follows
        (START, P(0, 1), True, "resumed", START),  # a join from the start
        (START, None, False, "resumed", START),  # not started yet: live follows
        (P(0, 1), P(1, 0), True, "resumed", P(0, 1)),  # transcript, then the answer
        (P(1, 4), P(2, 0), True, "restarted", P(2, -1)),  # a failover since
        (P(1, 4), P(1, 9), True, "expired", P(1, 4)),  # trimmed: a hole
        (P(1, 4), P(3, 2), True, "expired", P(1, 4)),  # a later epoch, not from its start
        (P(1, 4), None, False, "expired", P(1, 4)),  # the log is gone
    ],
)
def test_resume_plans(after, first, exists, status, position):
    plan = plan_resume(after, first, log_exists=exists)
    assert (plan.status, plan.position) == (status, position)


def test_relay_messages_carry_positions_for_logged_frames():
    logged, live = encode(chunk()), encode(completed("t"))
    message = b"[[1,3," + logged + b"]," + live + b"]"
    assert decode_relay_message(message) == [(chunk(), P(1, 3)), (completed("t"), None)]
    with pytest.raises(DecodeError):
        decode_relay_message(b"[[1,3," + b'{"type":"nope","v":1}' + b"]]")
    with pytest.raises(DecodeError):
        decode_relay_message(b'{"not": "a list"}')


def test_log_entries_decode_and_skip_unreadable_ones():
    entries = [
        (b"1-0", {b"e": encode(chunk(seq=0))}),
        (b"1-1", {b"e": b"garbage"}),
        (b"1-2", {b"other": b"field"}),
        (b"1-3", {b"e": encode(chunk(seq=1))}),
    ]
    assert decode_entries(entries) == [(chunk(seq=0), P(1, 0)), (chunk(seq=1), P(1, 3))]
