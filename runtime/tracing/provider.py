"""Settings → this process's tracer provider and exporter (the OpenTelemetry SDK).

Called once at start (`runtime.service_process.start_process`, `stream_jobs.faust_app`).
`TURNSTREAM_OTEL_EXPORTER=none`, the default, installs nothing: the services keep the
API's no-op tracer, which records nothing and costs next to nothing, and the SDK is never
imported. Otherwise spans go through a batch processor (a background thread: a slow or
absent collector costs dropped spans, never turn latency) to the OTLP exporter, or to
stdout with `console`. Sampling is parent-based with a ratio at the root: the edge decides
once per turn and every hop follows, so a trace is never half-recorded.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from runtime.settings import Settings
from runtime.tracing.spans import install
from schemas.errors import SettingsError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

EXPORTERS = ("none", "otlp-http", "otlp-grpc", "console")
ROLE_NAMES = {"ws_edge": "edge"}  # package → role, where they differ


def role_of_main() -> str:
    """The role this process runs, from its `python -m <package>` (e.g. inference)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    parts = (spec.name if spec is not None else "").split(".")
    if parts and parts[-1] == "__main__":
        parts = parts[:-1]
    package = parts[-1] if parts and parts[-1] else "process"
    return ROLE_NAMES.get(package, package)


def service_name(settings: Settings, role: str) -> str:
    return settings.otel_service_name or f"turnstream-{role}"


def check(settings: Settings) -> None:
    if settings.otel_exporter not in EXPORTERS:
        raise SettingsError(
            f"TURNSTREAM_OTEL_EXPORTER={settings.otel_exporter!r}: not one of {EXPORTERS}"
        )
    if not 0.0 <= settings.otel_sample_ratio <= 1.0:
        raise SettingsError(
            f"TURNSTREAM_OTEL_SAMPLE_RATIO={settings.otel_sample_ratio}: not in [0, 1]"
        )


def make_exporter(settings: Settings) -> SpanExporter | None:
    """The exporter the settings name (None for `none`)."""
    check(settings)
    endpoint = settings.otel_endpoint or None
    match settings.otel_exporter:
        case "otlp-http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
                endpoint = endpoint.rstrip("/") + "/v1/traces"
            return OTLPSpanExporter(endpoint=endpoint)
        case "otlp-grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            insecure = None if endpoint is None else endpoint.startswith("http://")
            return GrpcSpanExporter(endpoint=endpoint, insecure=insecure)
        case "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter()
    return None


def make_provider(
    settings: Settings, role: str, exporter: SpanExporter, *, batch: bool = True
) -> TracerProvider:
    """A provider for this role's spans; `batch=False` exports each span as it ends (tests)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    check(settings)
    provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(settings.otel_sample_ratio)),
        resource=Resource.create(
            {"service.name": service_name(settings, role), "service.namespace": "turnstream"}
        ),
    )
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def configure(settings: Settings, role: str | None = None) -> TracerProvider | None:
    """Install this process's tracing from the settings; the provider (None: tracing off).
    The provider flushes and shuts down at exit."""
    exporter = make_exporter(settings)
    if exporter is None:
        install(None)
        return None
    provider = make_provider(settings, role or role_of_main(), exporter)
    install(provider)
    return provider
