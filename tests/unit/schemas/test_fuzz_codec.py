"""Property-based fuzzing of the event codec (`schemas.codec`).

Every service decodes payloads it did not write (Kafka records, Redis relay messages): the
consumers dead-letter exactly the `schemas.errors.DecodeError` family and treat anything else
as a bug of their own (retried, left uncommitted). So `decode`/`decode_batch` must turn *any*
input into an event or a `DecodeError`, and `encode` → `decode` must give back the same event.

`msgspec_strategy` builds hypothesis strategies from msgspec types (constraints included);
the protocol fuzz tests reuse it for the client messages.

Example counts: TURNSTREAM_FUZZ_EXAMPLES (default 300); e.g.
`TURNSTREAM_FUZZ_EXAMPLES=20000 pytest tests/unit/schemas/test_fuzz_codec.py`.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import KNOWN_TYPES, decode, decode_batch, encode, encode_batch
from schemas.errors import DecodeError, MalformedEvent, UnknownEventType, UnsupportedVersion
from schemas.events import (
    WIRE_VERSION,
    AnyEvent,
    FeedbackGiven,
    TokenChunk,
    TurnCancelled,
    TurnCompleted,
    TurnSubmitted,
)

EXAMPLES = int(os.environ.get("TURNSTREAM_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INT64 = (-(2**63), 2**63 - 1)


# ---- strategies from msgspec types -----------------------------------------------------------
def _bounds(info: Any, lo: Any, hi: Any) -> tuple[Any, Any]:
    if info.ge is not None:
        lo = info.ge
    if info.gt is not None:
        lo = info.gt + 1 if isinstance(info.gt, int) else info.gt
    if info.le is not None:
        hi = info.le
    if info.lt is not None:
        hi = info.lt - 1 if isinstance(info.lt, int) else info.lt
    return lo, hi


def _type_strategy(info: mi.Type, overrides: dict[str, st.SearchStrategy[Any]]) -> Any:
    match info:
        case mi.StrType(min_length=lo, max_length=hi, pattern=pattern) if pattern is not None:
            text = st.from_regex(pattern, fullmatch=True)
            return text.filter(lambda s: len(s) >= (lo or 0) and (hi is None or len(s) <= hi))
        case mi.StrType(min_length=lo, max_length=hi):
            return st.text(min_size=lo or 0, max_size=min(hi if hi is not None else 40, 40))
        case mi.IntType():
            lo, hi = _bounds(info, *INT64)
            return st.integers(lo, hi)
        case mi.FloatType():
            lo, hi = _bounds(info, None, None)
            return st.floats(lo, hi, allow_nan=False, allow_infinity=False)
        case mi.BoolType():
            return st.booleans()
        case mi.NoneType():
            return st.none()
        case mi.BytesType():
            return st.binary(max_size=64)
        case mi.EnumType(cls=cls):
            return st.sampled_from(list(cls))
        case mi.LiteralType(values=values):
            return st.sampled_from(values)
        case mi.ListType(item_type=item, min_length=lo, max_length=hi):
            return st.lists(
                _type_strategy(item, overrides), min_size=lo or 0, max_size=min(hi or 3, 3)
            )
        case mi.DictType(key_type=key, value_type=value):
            return st.dictionaries(
                _type_strategy(key, overrides), _type_strategy(value, overrides), max_size=3
            )
        case mi.UnionType(types=types):
            return st.one_of([_type_strategy(t, overrides) for t in types])
        case mi.StructType():
            return _struct_strategy(info, overrides)
        case mi.AnyType():  # free JSON (a response format's schema)
            return json_values
    raise NotImplementedError(f"no strategy for {info!r}")


def _struct_strategy(info: mi.StructType, overrides: dict[str, st.SearchStrategy[Any]]) -> Any:
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in info.fields:
        strategy = overrides[f.name] if f.name in overrides else _type_strategy(f.type, overrides)
        (required if f.required else optional)[f.name] = strategy
    cls = info.cls
    # fields with a default are sometimes left out (so the default, or UNSET, is used)
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


def msgspec_strategy(
    cls: type[msgspec.Struct], **overrides: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Instances of a msgspec struct, nested structs included, honouring its `Meta`
    constraints (patterns, lengths, bounds); `overrides` fixes fields by name at any depth.
    Ints stay within int64 and floats are finite: what the JSON wire can carry."""
    return _struct_strategy(mi.type_info(cls), overrides)  # type: ignore[arg-type]


ROUND_TRIP_TYPES = (TurnSubmitted, TokenChunk, TurnCompleted, TurnCancelled, FeedbackGiven)
events = st.one_of([msgspec_strategy(c, v=st.just(WIRE_VERSION)) for c in ROUND_TRIP_TYPES])


# ---- hostile payloads ------------------------------------------------------------------------
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def envelope_objects(draw: st.DrawFn) -> bytes:
    """Objects that pass the envelope check or nearly: a known (or unknown) type, a version
    (right or wrong), and random fields, some with the names real events use."""
    names = ["turn_id", "conversation_id", "seq", "text", "attempt", "tenant_id", "user_id"]
    obj: dict[str, Any] = draw(
        st.dictionaries(st.sampled_from(names) | st.text(max_size=8), json_values, max_size=6)
    )
    obj["type"] = draw(st.sampled_from(sorted(KNOWN_TYPES)) | json_values)
    if draw(st.booleans()):
        obj["v"] = draw(st.sampled_from([WIRE_VERSION, 0, 2, -1, 2**70]) | json_values)
    return msgspec.json.encode(obj)


@st.composite
def mutated_events(draw: st.DrawFn) -> bytes:
    """A real encoded event with bytes flipped, cut, inserted or spliced."""
    data = bytearray(encode(draw(events)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(
                st.binary(min_size=1, max_size=8) | st.sampled_from([b'"', b"{", b"]"])
            )
        elif data:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


# A ladder rather than a range: where recursion fails depends on the stack depth of the
# caller (and hypothesis raises the recursion limit while it runs), so shrinking a range to
# "the" smallest failing depth would be flaky; each rung fails or passes reliably.
DEPTHS = [1, 10, 100, 1_000, 10_000, 100_000]


def nested(depth: int, kind: str) -> bytes:
    """`depth` levels of arrays or objects, closed or not, in a field or at the top."""
    opening, closing = {"array": (b"[", b"]"), "object": (b'{"a":', b"}")}[kind]
    body = opening * depth + (b"1" if kind == "object" else b"") + closing * depth
    return b'{"type":"token.chunk","v":1,"x":' + body + b"}"


payloads = st.one_of(
    st.binary(max_size=512),
    st.text(max_size=256).map(str.encode),  # what Redis/Kafka hand over is bytes
    json_values.map(msgspec.json.encode),
    envelope_objects(),
    mutated_events(),
)


def decode_only_raises_decode_errors(payload: bytes | str) -> None:
    try:
        event = decode(payload)
    except DecodeError:
        return
    assert type(event).__struct_config__.tag in KNOWN_TYPES
    assert event.v == WIRE_VERSION


def decode_batch_only_raises_decode_errors(payload: bytes | str) -> None:
    try:
        batch = decode_batch(payload)
    except DecodeError:
        return
    assert isinstance(batch, list)
    assert all(e.v == WIRE_VERSION for e in batch)


# ---- properties ------------------------------------------------------------------------------
@FUZZ
@given(payloads)
def test_decode_raises_only_decode_errors(payload: bytes) -> None:
    decode_only_raises_decode_errors(payload)


@FUZZ
@given(payloads)
def test_decode_of_text_raises_only_decode_errors(payload: bytes) -> None:
    """`decode` also takes `str` (valid Unicode: no lone surrogates)."""
    decode_only_raises_decode_errors(payload.decode("utf-8", "replace"))


@FUZZ
@given(st.lists(payloads | events.map(encode), max_size=5), st.binary(max_size=64))
def test_decode_batch_raises_only_decode_errors(items: list[bytes], junk: bytes) -> None:
    decode_batch_only_raises_decode_errors(encode_batch(items))
    decode_batch_only_raises_decode_errors(junk)
    decode_batch_only_raises_decode_errors(encode_batch(items) + junk)


@pytest.mark.parametrize("where", ["event", "batch item", "batch"])
@FUZZ
@given(depth=st.sampled_from(DEPTHS), kind=st.sampled_from(["array", "object"]))
def test_deeply_nested_payloads_raise_decode_errors(where: str, depth: int, kind: str) -> None:
    """Nesting is not bounded by the payload size limits (1000 levels are 2 KB); it only
    costs the decoder stack depth."""
    payload = nested(depth, kind)
    if where == "event":
        decode_only_raises_decode_errors(payload)
    elif where == "batch item":
        decode_batch_only_raises_decode_errors(b"[" + payload + b"]")
    else:
        decode_batch_only_raises_decode_errors(b"[" * depth + b"]" * depth)


@FUZZ
@given(events)
def test_encode_then_decode_gives_back_the_event(event: AnyEvent) -> None:
    assert decode(encode(event)) == event
    assert decode(encode(event).decode()) == event


@FUZZ
@given(st.lists(events, max_size=6))
def test_a_batch_round_trips_in_order(batch: list[AnyEvent]) -> None:
    assert decode_batch(encode_batch([encode(e) for e in batch])) == batch


@FUZZ
@given(events, st.integers(*INT64).filter(lambda v: v != WIRE_VERSION))
def test_another_wire_version_is_refused_not_misread(event: AnyEvent, version: int) -> None:
    raw = msgspec.json.decode(encode(event))
    raw["v"] = version
    try:
        decode(msgspec.json.encode(raw))
    except UnsupportedVersion:
        return
    raise AssertionError(f"version {version} was decoded")


@FUZZ
@given(events, st.text(max_size=30).filter(lambda t: t not in KNOWN_TYPES))
def test_an_unknown_type_is_refused(event: AnyEvent, type_name: str) -> None:
    raw = msgspec.json.decode(encode(event))
    raw["type"] = type_name
    try:
        decode(msgspec.json.encode(raw))
    except UnknownEventType:
        return
    raise AssertionError(f"type {type_name!r} was decoded")


@FUZZ
@given(events, st.text(min_size=1, max_size=20), json_values)
def test_an_unknown_field_is_refused(event: AnyEvent, name: str, value: Any) -> None:
    raw = msgspec.json.decode(encode(event))
    if name in raw:
        return
    raw[name] = value
    try:
        decode(msgspec.json.encode(raw))
    except MalformedEvent:
        return
    raise AssertionError(f"unknown field {name!r} was accepted")
