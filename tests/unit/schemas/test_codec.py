import msgspec
import pytest

from schemas.codec import decode, encode
from schemas.errors import DecodeError, MalformedEvent, UnknownEventType, UnsupportedVersion
from schemas.events import (
    DecodingParams,
    ErrorInfo,
    FinishReason,
    Timings,
    TokenChunk,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
    Usage,
)

EVENTS = [
    TurnSubmitted(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="u1",
        edge_id="e1",
        text="hé ✓",
        submitted_at_ms=1.5,
        decoding=DecodingParams(max_tokens=9, seed=3),
    ),
    TurnCancelled(turn_id="t1", conversation_id="c1"),
    TokenChunk(turn_id="t1", seq=0, text="Hi", emitted_at_ms=2.0),
    TurnStarted(turn_id="t1", worker_id="w", model="m"),
    TurnCompleted(
        turn_id="t1",
        conversation_id="c1",
        tenant_id="acme",
        user_id="u1",
        finish_reason=FinishReason.ERROR,
        text="",
        usage=Usage(3, 0),
        timings=Timings(queue_ms=1, ttft_ms=None, e2e_ms=5, itl_ms=[1.0, 2.0]),
        model="m",
        worker_id="w",
        completed_at_ms=9.0,
        error=ErrorInfo("engine_error", "boom", True),
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips(event):
    wire = encode(event)
    assert msgspec.json.decode(wire)["v"] == 1
    assert decode(wire) == event


def test_newer_wire_version_is_rejected_not_misparsed():
    raw = msgspec.json.decode(encode(EVENTS[2]))
    raw["v"] = 2
    with pytest.raises(UnsupportedVersion, match="wire version 2"):
        decode(msgspec.json.encode(raw))


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"not json", MalformedEvent),
        (b"[1,2]", MalformedEvent),
        (b'{"type": "token.chunk"}', MalformedEvent),  # no version
        (b'{"v": 1, "type": "turn.exploded", "turn_id": "t"}', UnknownEventType),
        (
            b'{"v": 1, "type": "token.chunk", "turn_id": "t", "seq": "x", "text": "",'
            b' "emitted_at_ms": 1}',
            MalformedEvent,
        ),
        (
            b'{"v": 1, "type": "token.chunk", "turn_id": "t", "seq": 0, "text": "",'
            b' "emitted_at_ms": 1, "surprise": true}',
            MalformedEvent,
        ),
        (b"\xff\xfe", MalformedEvent),
    ],
)
def test_bad_payloads_raise_typed_errors(payload, error):
    with pytest.raises(error) as info:
        decode(payload)
    assert isinstance(info.value, DecodeError)
    assert info.value.code == error.code


def test_batches_round_trip_and_check_every_element():
    from schemas.codec import decode_batch, encode_batch

    assert decode_batch(encode_batch([encode(e) for e in EVENTS])) == EVENTS
    assert decode_batch(encode_batch([])) == []
    bad = encode_batch([encode(EVENTS[0]), b'{"v": 9, "type": "token.chunk"}'])
    with pytest.raises(UnsupportedVersion):
        decode_batch(bad)
    with pytest.raises(MalformedEvent):
        decode_batch(b'{"not": "a list"}')
