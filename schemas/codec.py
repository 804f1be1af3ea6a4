"""The one wire codec for events: JSON with a version envelope.

Wire shape: ``{"type": "turn.submitted", "turn_id": ..., "v": 1, ...}``. Decoding reads the
envelope first so a newer producer's events are rejected as `UnsupportedVersion` rather than
mis-parsed, then decodes the tagged union strictly (unknown fields are errors).
"""

from __future__ import annotations

import msgspec

from schemas.errors import MalformedEvent, UnknownEventType, UnsupportedVersion
from schemas.events import WIRE_VERSION, AnyEvent, Event

SUPPORTED_VERSIONS = frozenset({WIRE_VERSION})


class _Envelope(msgspec.Struct):
    type: str
    v: int


KNOWN_TYPES = frozenset(t.__struct_config__.tag for t in AnyEvent.__args__)
_envelope_decoder = msgspec.json.Decoder(_Envelope)
_event_decoder = msgspec.json.Decoder(AnyEvent)
_encoder = msgspec.json.Encoder()


def encode(event: Event) -> bytes:
    """Serialise an event (its `v` field carries the wire version)."""
    return _encoder.encode(event)


def decode(payload: bytes | str) -> AnyEvent:
    """Parse one event; raise a `DecodeError` subclass for anything that is not a valid event."""
    try:
        envelope = _envelope_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedEvent(f"not an event envelope: {exc}") from None
    except RecursionError:  # nesting deeper than the decoder's stack (found by fuzzing)
        raise MalformedEvent("event nested too deeply") from None
    if envelope.v not in SUPPORTED_VERSIONS:
        raise UnsupportedVersion(
            f"wire version {envelope.v} is not supported (speaks {sorted(SUPPORTED_VERSIONS)})"
        )
    if envelope.type not in KNOWN_TYPES:
        raise UnknownEventType(f"unknown event type {envelope.type!r}")
    try:
        return _event_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedEvent(f"invalid {envelope.type}: {exc}") from None
    except RecursionError:
        raise MalformedEvent(f"{envelope.type} nested too deeply") from None


_batch_decoder = msgspec.json.Decoder(list[msgspec.Raw])


def encode_batch(encoded_events: list[bytes]) -> bytes:
    """Several already-encoded events as one JSON array (one relay message, one decode)."""
    return b"[" + b",".join(encoded_events) + b"]"


def decode_batch(payload: bytes | str) -> list[AnyEvent]:
    """Parse a batch; every element is checked like a single event (`decode`)."""
    try:
        items = _batch_decoder.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MalformedEvent(f"not an event batch: {exc}") from None
    return [decode(bytes(item)) for item in items]
