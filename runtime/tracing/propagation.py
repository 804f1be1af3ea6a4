"""W3C trace context in and out of Kafka headers and event fields (OpenTelemetry API only).

Kafka headers are what aiokafka produces and consumes, a list of `(str, bytes)` pairs (faust
hands them over as a dict): `kafka_headers` writes the current context as a `traceparent`
(and `tracestate`) header, `from_kafka_headers` reads it back. Every hop re-injects its own
span, so the headers always name the immediate parent.

A turn's context also travels as a string in `TurnSubmitted.traceparent`, which every later
event embeds (`TurnEnriched.submitted`, `TurnAssembled.submitted`, `TraceRecorded.submitted`):
a fallback for records that have lost their headers (re-published, read back from a table
or the events log) and the turn's trace id for ClickHouse. `turn_traceparent` finds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from schemas.events import AnyEvent, TurnSubmitted

TRACEPARENT = "traceparent"
KafkaHeaders = Sequence[tuple[str, bytes]] | Mapping[str, bytes]

_propagator = TraceContextTextMapPropagator()
_FIELDS = frozenset(_propagator.fields)  # traceparent, tracestate


class _HeadersGetter(Getter[Any]):
    """Reads aiokafka's `[(key, bytes)]` and faust's `{key: bytes}` alike."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        if isinstance(carrier, Mapping):
            value = carrier.get(key)
            return None if value is None else [_text(value)]
        found = [_text(v) for k, v in carrier if k == key]
        return found or None

    def keys(self, carrier: Any) -> list[str]:
        return list(carrier) if isinstance(carrier, Mapping) else [k for k, _ in carrier]


class _HeadersSetter(Setter[list[tuple[str, bytes]]]):
    def set(self, carrier: list[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode()))


class _DictSetter(Setter[dict[str, str]]):
    def set(self, carrier: dict[str, str], key: str, value: str) -> None:
        carrier[key] = value


_getter, _setter, _dict_setter = _HeadersGetter(), _HeadersSetter(), _DictSetter()


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def has_context(context: Context | None = None) -> bool:
    """Whether `context` (default: the current one) holds a valid span to continue."""
    return trace.get_current_span(context).get_span_context().is_valid


def kafka_headers(context: Context | None = None) -> list[tuple[str, bytes]]:
    """The trace context as Kafka headers; empty when there is none (nothing to carry)."""
    headers: list[tuple[str, bytes]] = []
    if has_context(context):
        _propagator.inject(headers, context=context, setter=_setter)
    return headers


def with_kafka_headers(
    headers: Iterable[tuple[str, bytes]] | None, context: Context | None = None
) -> list[tuple[str, bytes]] | None:
    """`headers` plus the trace context, replacing any trace context they held (the sender
    is the parent now); None when there is nothing to send, as aiokafka expects."""
    trace_headers = kafka_headers(context)
    if not trace_headers:
        return None if headers is None else list(headers)
    kept = [(k, v) for k, v in headers or () if k not in _FIELDS]
    return kept + trace_headers


def from_kafka_headers(headers: KafkaHeaders | None) -> Context | None:
    """The context a record's headers carry; None when they carry none."""
    if not headers:
        return None
    context = _propagator.extract(headers, getter=_getter)
    return context if has_context(context) else None


def traceparent(context: Context | None = None) -> str:
    """The context (default: the current one) as a W3C `traceparent` value; "" when none."""
    if not has_context(context):
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context, setter=_dict_setter)
    return carrier.get(TRACEPARENT, "")


def from_traceparent(value: str) -> Context | None:
    """The context a `traceparent` value names; None when it is empty or malformed."""
    if not value:
        return None
    context = _propagator.extract({TRACEPARENT: value})
    return context if has_context(context) else None


def turn_traceparent(event: AnyEvent) -> str:
    """The turn's context as the event carries it (its own or its embedded `submitted`)."""
    if isinstance(event, TurnSubmitted):
        return event.traceparent
    submitted = getattr(event, "submitted", None)
    return submitted.traceparent if isinstance(submitted, TurnSubmitted) else ""


def incoming_context(headers: KafkaHeaders | None, event: AnyEvent | None) -> Context | None:
    """The parent of a record's processing: its headers' context (the hop that produced
    it), else the turn's own (`turn_traceparent`), else None (a new trace, if sampled)."""
    context = from_kafka_headers(headers)
    if context is None and event is not None:
        context = from_traceparent(turn_traceparent(event))
    return context


def from_http_headers(headers: Mapping[str, str] | None) -> Context | None:
    """The context of an HTTP request's `traceparent` header (a WebSocket upgrade's: the
    caller's own trace, which the turn's root span then joins); None when it has none."""
    if headers is None:
        return None
    value = headers.get(TRACEPARENT)
    return from_traceparent(value) if value else None
