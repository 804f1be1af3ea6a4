"""Collecting spans in tests: this process's (an in-memory exporter) and child processes'
(an OTLP/HTTP receiver on port 0, which the faust jobs export to with
TURNSTREAM_OTEL_EXPORTER=otlp-http, as they would to a collector)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime.settings import Settings
from runtime.tracing.provider import make_provider
from runtime.tracing.spans import install


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A finished span, whichever process recorded it (ids as lowercase hex)."""

    service: str
    name: str
    kind: str  # SERVER, CLIENT, PRODUCER, CONSUMER, INTERNAL
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict
    events: tuple[str, ...] = ()


@contextlib.contextmanager
def in_memory_tracing(settings: Settings | None = None) -> Iterator[InMemorySpanExporter]:
    """Record this process's spans (each exported as it ends) until the block ends."""
    exporter = InMemorySpanExporter()
    provider = make_provider(settings or Settings(), "tests", exporter, batch=False)
    install(provider)
    try:
        yield exporter
    finally:
        install(None)
        provider.shutdown()


def local_spans(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    return [
        SpanRecord(
            service=str(span.resource.attributes.get("service.name", "")),
            name=span.name,
            kind=span.kind.name,
            trace_id=format(span.context.trace_id, "032x"),
            span_id=format(span.context.span_id, "016x"),
            parent_id=format(span.parent.span_id, "016x") if span.parent else "",
            attributes=dict(span.attributes or {}),
            events=tuple(e.name for e in span.events),
        )
        for span in exporter.get_finished_spans()
    ]


_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(any_value) -> object:
    field = any_value.WhichOneof("value")
    return getattr(any_value, field) if field else None


class OtlpReceiver:
    """What an OTel collector would receive over OTLP/HTTP (protobuf), kept in a list."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.endpoint = ""

    async def _traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        SpanRecord(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            kind=_KINDS.get(span.kind, "UNSPECIFIED"),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=tuple(e.name for e in span.events),
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls) -> AsyncIterator[OtlpReceiver]:
        receiver = cls()
        app = web.Application()
        app.router.add_post("/v1/traces", receiver._traces)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        receiver.endpoint = f"http://127.0.0.1:{port}"
        try:
            yield receiver
        finally:
            await runner.cleanup()
