"""The process's tracer and the spans of a hop (OpenTelemetry API only: hot paths import this).

Names and attributes follow the OpenTelemetry semantic conventions:

- messaging (Kafka): `send <topic>` (PRODUCER) around producing a record, `process <topic>`
  (CONSUMER) around handling one, with `messaging.system=kafka`,
  `messaging.destination.name`, `messaging.operation.{type,name}`, the partition, offset and
  consumer group;
- GenAI: `chat <model>` around a generation, with `gen_ai.request.*`, `gen_ai.usage.*`,
  `gen_ai.response.finish_reasons` and an event at the first token;
- the edge: `turn` (SERVER), the turn's root span, from `turn.create` to the answer's end.

The spans a hop opens for a turn name it (`turnstream.turn.id`), so a trace is found from a
turn id; the `send` spans of the workers' producer do not (they sit under a `process` span
that does). The tracer is the API's no-op tracer until `install` is given a
provider (`runtime.tracing.provider.configure`); a no-op span still carries its parent's
context, so what a process with tracing off produces still continues the trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from runtime.tracing.propagation import has_context, with_kafka_headers

SCOPE = "turnstream"
TURN_ID = "turnstream.turn.id"


@dataclass(slots=True)
class _Active:
    tracer: trace.Tracer
    recording: bool  # spans are recorded (else attributes are not even built)


_active = _Active(trace.NoOpTracer(), recording=False)


def install(provider: trace.TracerProvider | None) -> None:
    """Make `provider` this process's source of spans (None: the no-op tracer again)."""
    _active.tracer = trace.NoOpTracer() if provider is None else provider.get_tracer(SCOPE)
    _active.recording = provider is not None


def tracer() -> trace.Tracer:
    return _active.tracer


def recording() -> bool:
    """Whether spans are recorded at all (an exporter is configured)."""
    return _active.recording


def _root_unless(parent: Context | None) -> Context:
    # An explicit empty context: no parent means a new trace, never whatever the calling
    # task happens to have as its current span.
    return parent if parent is not None else Context()


@contextlib.contextmanager
def consuming(
    topic: str,
    *,
    parent: Context | None,
    turn_id: str = "",
    partition: int | None = None,
    offset: int | None = None,
    group: str = "",
) -> Iterator[Span]:
    """`process <topic>`: the current span while one record is handled."""
    if parent is None and not _active.recording:  # tracing off, nothing to pass on: no-op
        yield trace.INVALID_SPAN
        return
    attributes = None
    if _active.recording:
        attributes = _messaging(topic, "process")
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        if offset is not None:
            attributes["messaging.kafka.offset"] = offset
        if group:
            attributes["messaging.consumer.group.name"] = group
        if turn_id:
            attributes[TURN_ID] = turn_id
    with _active.tracer.start_as_current_span(
        f"process {topic}",
        context=_root_unless(parent),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span


@contextlib.contextmanager
def producing(
    topic: str,
    headers: Iterable[tuple[str, bytes]] | None = None,
    *,
    parent: Context | None = None,
    turn_id: str = "",
) -> Iterator[list[tuple[str, bytes]] | None]:
    """`send <topic>` around producing one record, when there is a trace to continue
    (`parent`, default: the current context); yields the headers to send it with (`headers`
    plus the trace context). Without a trace: no span, the headers as they were."""
    if not has_context(parent):
        yield None if headers is None else list(headers)
        return
    attributes = None
    if _active.recording:
        attributes = _messaging(topic, "send")
        if turn_id:
            attributes[TURN_ID] = turn_id
    with _active.tracer.start_as_current_span(
        f"send {topic}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield with_kafka_headers(headers)


def _messaging(topic: str, operation: str) -> dict[str, str | int]:
    return {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


def start_turn(
    turn_id: str, *, conversation_id: str, tenant_id: str, parent: Context | None
) -> Span:
    """The turn's root span at the edge (SERVER; `parent`: the caller's own trace, from a
    `traceparent` header on the WebSocket upgrade). Not made current: the caller ends it
    when the answer is done (or the connection goes)."""
    attributes = None
    if _active.recording:
        attributes = {
            TURN_ID: turn_id,
            "turnstream.conversation.id": conversation_id,
            "turnstream.tenant.id": tenant_id,
        }
    return _active.tracer.start_span(
        "turn", context=_root_unless(parent), kind=SpanKind.SERVER, attributes=attributes
    )


@contextlib.contextmanager
def generating(
    model: str,
    *,
    turn_id: str,
    max_tokens: int,
    temperature: float,
    top_p: float,
    provider: str = "vllm",
) -> Iterator[Span]:
    """`chat <model>`: one generation (INTERNAL: the engine runs in this process)."""
    attributes: dict[str, AttributeValue] | None = None
    if _active.recording:
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.request.temperature": temperature,
            "gen_ai.request.top_p": top_p,
            TURN_ID: turn_id,
        }
    with _active.tracer.start_as_current_span(
        f"chat {model}", kind=SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield span


def record_generation(
    span: Span,
    *,
    model: str,
    finish_reason: str,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int = 0,
    error_code: str = "",
) -> None:
    """What a generation came to, on its `chat` span."""
    if not span.is_recording():
        return
    span.set_attributes(
        {
            "gen_ai.response.model": model,
            "gen_ai.response.finish_reasons": [finish_reason],
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.usage.cache_read.input_tokens": cached_input_tokens,
        }
    )
    if error_code:
        span.set_attribute("error.type", error_code)
        span.set_status(Status(StatusCode.ERROR, error_code))


def mark(name: str, span: Span | None = None) -> None:
    """An event on `span` (default: the current one), e.g. the first token."""
    target = span if span is not None else trace.get_current_span()
    if target.is_recording():
        target.add_event(name)


def traced(span: Span) -> bool:
    """Whether `span` belongs to a trace (recorded here or only passed through)."""
    return span.get_span_context().is_valid


def current(span: Span):
    """A block in which `span` is the current span; it stays open after the block."""
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def failed(error: BaseException | str, span: Span | None = None) -> None:
    """Mark `span` (default: the current one) as failed, with the error."""
    target = span if span is not None else trace.get_current_span()
    if not target.is_recording():
        return
    if isinstance(error, BaseException):
        target.record_exception(error)
        error = type(error).__name__
    target.set_attribute("error.type", error)
    target.set_status(Status(StatusCode.ERROR, error))


def end_turn(
    span: Span,
    *,
    delivery: str,
    finish_reason: str = "",
    error_code: str = "",
    completion_tokens: int | None = None,
) -> None:
    """End the edge's turn span: `delivery` says how the answer's stream ended here
    (done, refused, disconnected)."""
    if span.is_recording():
        span.set_attribute("turnstream.delivery", delivery)
        if finish_reason:
            span.set_attribute("turnstream.finish_reason", finish_reason)
        if completion_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", completion_tokens)
        if error_code:
            failed(error_code, span)
    span.end()


@contextlib.contextmanager
def held_turn(name: str, turn_id: str, *, parent: Context | None) -> Iterator[Span]:
    """A span in a turn's own trace (`parent`: its context) for work done while handling
    another record (a turn released when an earlier one of its conversation ended),
    linked to the span that was current."""
    links, attributes = None, None
    if _active.recording:
        attributes = {TURN_ID: turn_id}
        releaser = trace.get_current_span().get_span_context()
        links = [trace.Link(releaser)] if releaser.is_valid else None
    with _active.tracer.start_as_current_span(
        name, context=_root_unless(parent), links=links, attributes=attributes
    ) as span:
        yield span
