"""Trace context in Kafka headers and events, the spans of a hop, settings → provider."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from harness.factories import completed, submitted
from harness.tracing import in_memory_tracing, local_spans
from runtime.settings import Settings
from runtime.tracing import provider as tracing_provider
from runtime.tracing import spans
from runtime.tracing.propagation import (
    from_http_headers,
    from_kafka_headers,
    from_traceparent,
    incoming_context,
    kafka_headers,
    traceparent,
    with_kafka_headers,
)
from schemas.errors import SettingsError
from schemas.events import PromptContext, TurnAssembled, TurnEnriched
from schemas.traceparent import trace_id_of
from schemas.traces import build_trace

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def _ids(context) -> tuple[str, str]:
    span_context = trace.get_current_span(context).get_span_context()
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def test_kafka_headers_round_trip_as_aiokafka_lists_and_faust_dicts():
    context = from_traceparent(PARENT)
    headers = kafka_headers(context)
    assert headers == [("traceparent", PARENT.encode())]
    assert _ids(from_kafka_headers(headers)) == _ids(context)
    assert _ids(from_kafka_headers(dict(headers))) == _ids(context)  # faust's event.headers
    assert traceparent(from_kafka_headers(headers)) == PARENT


def test_no_context_means_no_headers_and_none_back():
    assert kafka_headers() == []
    assert with_kafka_headers(None) is None
    assert with_kafka_headers([("source_topic", b"t")]) == [("source_topic", b"t")]
    assert from_kafka_headers(None) is None
    assert from_kafka_headers([("source_topic", b"t")]) is None
    assert from_kafka_headers([("traceparent", b"garbage")]) is None
    assert traceparent() == "" and from_traceparent("") is None
    assert from_http_headers({"traceparent": "nonsense"}) is None


def test_the_sender_replaces_any_trace_context_the_headers_held():
    old = [("error_code", b"x"), ("traceparent", UNSAMPLED.encode())]
    mine = "00-11111111111111111111111111111111-2222222222222222-01"
    merged = with_kafka_headers(old, from_traceparent(mine))
    assert merged == [("error_code", b"x"), ("traceparent", mine.encode())]


def test_trace_id_only_for_a_sampled_context():
    assert trace_id_of(PARENT) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of(UNSAMPLED) == ""  # nobody keeps its spans: nothing to look up
    assert trace_id_of("") == "" and trace_id_of("00-zz") == ""


def test_a_record_without_headers_falls_back_to_the_turn_carried_in_the_event():
    turn = submitted("t1", traceparent=PARENT)
    enriched = TurnEnriched(turn_id="t1", submitted=turn, text="hi")
    assert _ids(incoming_context(None, enriched))[0] == trace_id_of(PARENT)
    assert _ids(incoming_context([], turn))[0] == trace_id_of(PARENT)
    # headers win: they name the hop that produced the record
    hop = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
    from_hop = incoming_context([("traceparent", hop.encode())], enriched)
    assert _ids(from_hop)[1] == "00f067aa0ba902b7"
    assert incoming_context(None, completed("t1")) is None  # nothing to continue


def test_old_events_without_the_field_decode_and_the_field_is_optional():
    from schemas.codec import decode, encode

    turn = submitted("t2")
    assert turn.traceparent == ""
    raw = encode(turn).replace(b',"traceparent":""', b"")
    assert b"traceparent" not in raw
    assert decode(raw) == turn


def test_the_trace_row_names_the_trace_of_a_sampled_turn():
    turn = submitted("t3", traceparent=PARENT)
    row = build_trace(turn, completed=completed("t3"))
    assert row.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert build_trace(submitted("t4"), completed=completed("t4")).trace_id == ""


def test_a_hop_continues_the_trace_it_consumed_and_hands_it_on():
    with in_memory_tracing() as exporter:
        with (
            spans.consuming("ns.turns.enriched", parent=from_traceparent(PARENT), turn_id="t5"),
            spans.producing("ns.turns.assembled", [("k", b"v")], turn_id="t5") as headers,
        ):
            sent = from_kafka_headers(headers)
        assert headers is not None and ("k", b"v") in headers
        found = {s.name: s for s in local_spans(exporter)}
    process, send = found["process ns.turns.enriched"], found["send ns.turns.assembled"]
    assert process.kind == "CONSUMER" and send.kind == "PRODUCER"
    assert process.trace_id == send.trace_id == trace_id_of(PARENT)
    assert process.parent_id == "b7ad6b7169203331" and send.parent_id == process.span_id
    assert _ids(sent)[1] == send.span_id  # the next hop's parent is the send span
    assert process.attributes["messaging.system"] == "kafka"
    assert process.attributes["messaging.destination.name"] == "ns.turns.enriched"
    assert process.attributes["messaging.operation.type"] == "process"
    assert send.attributes["turnstream.turn.id"] == "t5"


def test_without_a_trace_nothing_is_sent_along_or_recorded():
    with in_memory_tracing() as exporter:
        with spans.producing("ns.metrics", None) as headers:
            pass
        assert headers is None and exporter.get_finished_spans() == ()


def test_the_generation_span_follows_the_genai_conventions():
    with in_memory_tracing() as exporter:
        with spans.generating(
            "smollm2", turn_id="t6", max_tokens=64, temperature=0.0, top_p=1.0
        ) as span:
            spans.mark("first_token")
            spans.record_generation(
                span, model="smollm2", finish_reason="stop", input_tokens=12, output_tokens=7
            )
        (chat,) = local_spans(exporter)
    assert chat.name == "chat smollm2" and chat.events == ("first_token",)
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "smollm2"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_tracing_off_records_nothing_but_passes_the_context_through():
    tracing_provider.configure(Settings(otel_exporter="none"))
    assert not spans.recording()
    with (
        spans.consuming("ns.turns.submitted", parent=from_traceparent(PARENT)) as span,
        spans.producing("ns.turns.enriched") as headers,
    ):
        assert not span.is_recording()
    assert headers == [("traceparent", PARENT.encode())]  # the upstream span, unchanged
    root = spans.start_turn("t7", conversation_id="c", tenant_id="a", parent=None)
    assert not spans.traced(root)  # no caller trace: the edge keeps nothing per turn


@pytest.mark.parametrize(
    ("exporter", "kind"),
    [
        ("otlp-http", "opentelemetry.exporter.otlp.proto.http"),
        ("otlp-grpc", "opentelemetry.exporter.otlp.proto.grpc"),
        ("console", "opentelemetry.sdk.trace.export"),
    ],
)
def test_settings_choose_the_exporter(exporter, kind):
    settings = Settings(otel_exporter=exporter, otel_endpoint="http://collector:4318")
    made = tracing_provider.make_exporter(settings)
    assert type(made).__module__.startswith(kind)
    if exporter == "otlp-http":
        assert made._endpoint == "http://collector:4318/v1/traces"
    made.shutdown()


def test_settings_make_the_provider_with_the_role_and_ratio():
    settings = Settings(otel_exporter="console", otel_sample_ratio=0.25)
    try:
        provider = tracing_provider.configure(settings, "assembly")
        assert isinstance(provider, TracerProvider) and spans.recording()
        assert provider.resource.attributes["service.name"] == "turnstream-assembly"
        assert "TraceIdRatioBased{0.25}" in provider.sampler.get_description()
    finally:
        spans.install(None)
        provider.shutdown()
    named = Settings(otel_service_name="edge-eu-1")
    assert tracing_provider.service_name(named, "edge") == "edge-eu-1"
    assert tracing_provider.configure(Settings()) is None and not spans.recording()


def test_an_unsampled_turn_propagates_its_decision_without_recording():
    with in_memory_tracing(Settings(otel_sample_ratio=0.0)) as exporter:
        root = spans.start_turn("t8", conversation_id="c", tenant_id="a", parent=None)
        assert spans.traced(root) and not root.is_recording()
        with spans.current(root), spans.producing("ns.turns.submitted") as headers:
            pass
        root.end()
        assert exporter.get_finished_spans() == ()
    value = headers[0][1].decode()
    assert int(value.rsplit("-", 1)[1], 16) & 1 == 0  # the sampled flag is off
    assert trace_id_of(value) == ""


@pytest.mark.parametrize("bad", [Settings(otel_exporter="jaeger"), Settings(otel_sample_ratio=1.5)])
def test_bad_tracing_settings_are_refused(bad):
    with pytest.raises(SettingsError):
        tracing_provider.configure(bad)


def test_the_role_comes_from_the_module_run():
    assert tracing_provider.ROLE_NAMES["ws_edge"] == "edge"
    assert isinstance(tracing_provider.role_of_main(), str)


def test_assembled_events_carry_the_turns_context_too():
    turn = submitted("t9", traceparent=PARENT)
    context = PromptContext(history_messages=0, dropped_messages=0, prompt_tokens=0)
    assembled = TurnAssembled(
        turn_id="t9", submitted=turn, messages=[], context=context, assembled_at_ms=0.0
    )
    assert _ids(incoming_context(None, assembled))[0] == trace_id_of(PARENT)


@pytest.mark.parametrize(
    "value",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "  00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03 ",
        "garbage",
    ],
)
def test_the_contracts_trace_id_reads_traceparent_as_opentelemetry_does(value):
    """schemas.traceparent parses W3C trace context without the tracing library: it must
    agree with OpenTelemetry's propagator on every accepted and refused value."""
    context = from_traceparent(value)
    expected = ""
    if context is not None:
        span = trace.get_current_span(context).get_span_context()
        expected = format(span.trace_id, "032x") if span.trace_flags.sampled else ""
    assert trace_id_of(value) == expected
