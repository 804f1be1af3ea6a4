"""One turn is one trace: real text turns through the real pipeline (fake engine), spans
from this process (edge, preprocessing, inference, safety: an in-memory exporter) and from
the faust jobs' own processes (assembly, traces: OTLP/HTTP to a receiver in this test)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness.factories import new_conversation_id as conv
from harness.kafka import find_record
from harness.stack import Pipeline, pipeline, running_job
from harness.tracing import OtlpReceiver, SpanRecord, in_memory_tracing, local_spans
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import TraceRecorded
from schemas.topics import TRACES
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Traced:
    pipeline: Pipeline
    local: InMemorySpanExporter
    remote: OtlpReceiver

    def spans(self) -> list[SpanRecord]:
        return local_spans(self.local) + list(self.remote.spans)

    def of_turn(self, turn_id: str) -> list[SpanRecord]:
        return [s for s in self.spans() if s.attributes.get("turnstream.turn.id") == turn_id]

    def root(self, turn_id: str) -> SpanRecord:
        (root,) = [s for s in self.of_turn(turn_id) if s.name == "turn"]
        return root

    def in_trace(self, trace_id: str) -> list[SpanRecord]:
        return [s for s in self.spans() if s.trace_id == trace_id]

    async def wait_for(self, found, timeout_s: float = 60.0):
        """Poll until `found()` is truthy: the jobs export in batches every few seconds."""
        deadline = time.monotonic() + timeout_s
        while not (result := found()):
            assert time.monotonic() < deadline, "spans did not arrive"
            await asyncio.sleep(0.2)
        return result


@pytest.fixture(scope="module")
async def traced(services: Settings, session_namespace: str):
    async with OtlpReceiver.running() as receiver:
        settings = Settings.from_env(
            namespace=f"{session_namespace}-otel",
            edge_port=0,
            otel_exporter="otlp-http",  # the faust jobs (child processes) export to it
            otel_endpoint=receiver.endpoint,
        )
        with in_memory_tracing() as local:  # this process's roles
            async with (
                pipeline(settings, FakeEngine(token_interval_s=0.005)) as running,
                running_job(settings, "traces"),
            ):
                yield Traced(running, local, receiver)


async def test_one_turn_is_one_trace_across_every_hop(traced: Traced):
    async with EdgeClient.connect(traced.pipeline.url, traced.pipeline.token()) as client:
        done = await client.ask(conv(), "follow me through the pipeline")
    turn = done.turn_id
    ns = traced.pipeline.settings.namespace
    trace_id = traced.root(turn).trace_id

    def named(service: str, name: str) -> SpanRecord | None:
        return next(
            (s for s in traced.in_trace(trace_id) if s.service == service and s.name == name),
            None,
        )

    here, assembly, traces = "turnstream-tests", "turnstream-assembly", "turnstream-traces"
    expected = [
        (here, "turn"),
        (here, f"send {ns}.turns.submitted"),
        (here, f"process {ns}.turns.submitted"),  # preprocessing
        (here, f"send {ns}.turns.enriched"),
        (assembly, f"process {ns}.turns.enriched"),
        (assembly, f"send {ns}.inference.chat"),  # the work, and the turn's assembled record
        (here, f"process {ns}.inference.chat"),  # inference
        (here, "chat fake-echo"),
        (here, f"send {ns}.turns.completed"),
        (assembly, f"process {ns}.turns.completed"),  # the history
        (traces, f"process {ns}.turns.submitted"),
        (traces, f"process {ns}.turns.completed"),  # it carries how the turn was assembled
        (traces, f"send {ns}.traces"),
    ]
    await traced.wait_for(lambda: all(named(*e) for e in expected))
    spans = traced.in_trace(trace_id)
    # every span that names the turn is in its one trace, and the trace is one tree
    assert {s.trace_id for s in traced.of_turn(turn)} == {trace_id}
    ids = {s.span_id for s in spans}
    assert [s.name for s in spans if not s.parent_id] == ["turn"]
    assert all(s.parent_id in ids for s in spans if s.parent_id), "a span lost its parent"

    def parent(child: tuple[str, str]) -> SpanRecord:
        span = named(*child)
        return next(s for s in spans if s.span_id == span.parent_id)

    assert parent((here, f"send {ns}.turns.submitted")).name == "turn"
    assert parent((here, f"process {ns}.turns.submitted")).name == f"send {ns}.turns.submitted"
    assert parent((assembly, f"process {ns}.turns.enriched")) == named(
        here, f"send {ns}.turns.enriched"
    )
    assert parent((here, f"process {ns}.inference.chat")) == named(
        assembly, f"send {ns}.inference.chat"
    )
    assert parent((here, "chat fake-echo")) == named(here, f"process {ns}.inference.chat")
    assert parent((traces, f"process {ns}.turns.completed")) == named(
        here, f"send {ns}.turns.completed"
    )
    # the edge's turn span: the answer's way to the user, as events
    root = traced.root(turn)
    assert root.kind == "SERVER" and root.attributes["turnstream.delivery"] == "done"
    assert {"turn.accepted", "turn.started", "first_token"} <= set(root.events)
    chat = named(here, "chat fake-echo")
    assert chat.attributes["gen_ai.request.model"] == "fake-echo"
    assert chat.attributes["gen_ai.usage.output_tokens"] == done.usage.completion_tokens
    consumed = named(here, f"process {ns}.inference.chat")
    assert consumed.kind == "CONSUMER" and consumed.attributes["messaging.system"] == "kafka"
    # the trace record (the ClickHouse row's source) names the same trace
    settings = traced.pipeline.settings
    record = await find_record(
        settings.kafka_bootstrap,
        TRACES.full_name(settings.namespace),
        lambda r: turn.encode() in r.value,
    )
    recorded = decode(record.value)
    assert isinstance(recorded, TraceRecorded)
    assert recorded.submitted.traceparent.split("-")[1] == trace_id
    assert dict(record.headers)["traceparent"].decode().split("-")[1] == trace_id
    # and it carries the marks the trace's hops are cut at, in the order the turn passed them
    assert recorded.context is not None and recorded.submitted.edge_id
    marks = (recorded.enriched_at_ms, recorded.context.assembled_at_ms)
    assert recorded.submitted.submitted_at_ms <= marks[0] <= marks[1], marks


async def test_two_concurrent_turns_are_two_traces(traced: Traced):
    async with EdgeClient.connect(traced.pipeline.url, traced.pipeline.token()) as client:
        first, second = await asyncio.gather(
            client.ask(conv(), "first of two"), client.ask(conv(), "second of two")
        )
    hops = {"turn", "chat fake-echo"}

    def complete(turn_id: str) -> bool:
        return hops <= {s.name for s in traced.of_turn(turn_id)}

    await traced.wait_for(lambda: complete(first.turn_id) and complete(second.turn_id))
    traces = [{s.trace_id for s in traced.of_turn(t.turn_id)} for t in (first, second)]
    assert all(len(ids) == 1 for ids in traces)
    assert traces[0] != traces[1]


async def test_a_callers_traceparent_makes_the_turn_part_of_its_trace(traced: Traced):
    pipe = traced.pipeline
    async with EdgeClient.connect(
        pipe.url, pipe.token(), headers={"traceparent": CALLER}
    ) as client:
        done = await client.ask(conv(), "part of a bigger trace")
    root = await traced.wait_for(lambda: traced.root(done.turn_id))
    assert root.trace_id == CALLER.split("-")[1]
    assert root.parent_id == CALLER.split("-")[2]
