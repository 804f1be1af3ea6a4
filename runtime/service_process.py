"""How every service process starts: settings read once, logging configured, the metrics
endpoint up (when TURNSTREAM_METRICS_PORT is set), tracing configured (when
TURNSTREAM_OTEL_EXPORTER names an exporter), and an event set by SIGINT/SIGTERM so the
service can stop gracefully (drain, flush, close); SIGTERM also comes when the process that
started it dies (`runtime.lifeline`)."""

from __future__ import annotations

import asyncio
import logging
import signal

from runtime.exposure import require_safe_exposure
from runtime.lifeline import watch_parent
from runtime.prometheus import serve_metrics
from runtime.settings import Settings
from runtime.tracing.provider import configure as configure_tracing


def start_process() -> tuple[Settings, asyncio.Event]:
    """Call first thing in a service's async main; returns its settings and stop event."""
    settings = Settings.from_env()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    serve_process_metrics(settings)
    configure_tracing(settings)  # the role from `python -m <package>`
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    watch_parent(settings)  # a parent that dies stops us too (SIGTERM: the graceful stop)
    return settings, stop


def serve_process_metrics(settings: Settings) -> None:
    """The metrics endpoint, if configured; a SettingsError when it would be reachable from
    other hosts without a token."""
    require_safe_exposure(settings)
    serve_metrics(settings.metrics_port, settings.metrics_host, settings.metrics_token)
