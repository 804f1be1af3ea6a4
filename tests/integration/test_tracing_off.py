"""Tracing off (TURNSTREAM_OTEL_EXPORTER=none, the default): turns work as before, nothing
is recorded or carried; a caller's own trace context still passes through every hop."""

from __future__ import annotations

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import find_record
from runtime.tracing import spans
from schemas.codec import decode
from schemas.events import TurnSubmitted
from schemas.topics import TURNS_ENRICHED, TURNS_SUBMITTED
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDone

pytestmark = pytest.mark.integration

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _record(settings, topic, turn_id: str):
    return await find_record(
        settings.kafka_bootstrap,
        topic.full_name(settings.namespace),
        lambda r: turn_id.encode() in r.value,
    )


async def test_without_an_exporter_nothing_is_recorded_or_carried(fake_pipeline):
    assert not spans.recording()  # the default settings install nothing
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        done = await client.ask(conv(), "no tracing here")
    assert isinstance(done, ResponseDone) and done.text.endswith("(turn 1)")
    record = await _record(fake_pipeline.settings, TURNS_SUBMITTED, done.turn_id)
    turn = decode(record.value)
    assert isinstance(turn, TurnSubmitted) and turn.traceparent == ""
    assert "traceparent" not in dict(record.headers or ())
    enriched = await _record(fake_pipeline.settings, TURNS_ENRICHED, done.turn_id)
    assert "traceparent" not in dict(enriched.headers or ())


async def test_a_callers_trace_passes_through_roles_that_do_not_trace(fake_pipeline):
    async with EdgeClient.connect(
        fake_pipeline.url, fake_pipeline.token(), headers={"traceparent": CALLER}
    ) as client:
        done = await client.ask(conv(), "pass it on")
    submitted = await _record(fake_pipeline.settings, TURNS_SUBMITTED, done.turn_id)
    assert decode(submitted.value).traceparent == CALLER
    assert dict(submitted.headers)["traceparent"] == CALLER.encode()
    # the preprocessing worker (tracing off too) hands the same context on
    enriched = await _record(fake_pipeline.settings, TURNS_ENRICHED, done.turn_id)
    assert dict(enriched.headers)["traceparent"] == CALLER.encode()
