"""Prometheus metrics of every service process, on `TURNSTREAM_METRICS_PORT` (0: off).

Names follow the OpenTelemetry GenAI semantic conventions where they exist
(`gen_ai.server.time_to_first_token` → `gen_ai_server_time_to_first_token_seconds`, ...),
vLLM's own names for engine state (`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`:
what the KEDA triggers in `infra/k8s` and vLLM dashboards read), and `turnstream_*` for the
rest. One registry per process; updating a metric costs about a microsecond, so the hot
paths (a turn's completion, an edge frame) update them directly.

The endpoint binds `TURNSTREAM_METRICS_HOST` (127.0.0.1 by default: a scraper on the same
host or pod). With `TURNSTREAM_METRICS_TOKEN` set it answers only requests bearing that token
(`Authorization: Bearer ...`, compared in constant time); a process refuses to bind another
address without one (`runtime.exposure`).
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _get_best_family, _SilentHandler

REGISTRY = CollectorRegistry()

# seconds; first tokens well under a second matter most, answers run for tens of seconds
_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60, 120)
_TOKEN_GAP = (0.001, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2.5)

# ---- inference: the application layer ------------------------------------------------------
TIME_TO_FIRST_TOKEN = Histogram(
    "gen_ai_server_time_to_first_token_seconds",
    "Time from the turn's submission to its first token.",
    ["pool", "model"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
TIME_PER_OUTPUT_TOKEN = Histogram(
    "gen_ai_server_time_per_output_token_seconds",
    "Gap between consecutive output chunks (inter-token latency).",
    ["pool", "model"],
    buckets=_TOKEN_GAP,
    registry=REGISTRY,
)
REQUEST_DURATION = Histogram(
    "gen_ai_server_request_duration_seconds",
    "End-to-end time of a turn, submission to its last token.",
    ["pool", "model", "finish_reason"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
TOKENS = Counter(
    "gen_ai_server_token_usage_total",
    "Tokens processed, by type (input: the prompt, output: generated).",
    ["pool", "model", "token_type"],
    registry=REGISTRY,
)
TURNS = Counter(
    "turnstream_turns_total",
    "Turns finished, by finish reason.",
    ["role", "pool", "finish_reason"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "turnstream_errors_total",
    "Errors by code (in-band errors the client saw, or a service's own).",
    ["role", "code"],
    registry=REGISTRY,
)
DEAD_LETTERS_SENT = Counter(
    "turnstream_dead_letters_total",
    "Records sent to the dead-letter topic, by source topic and error code "
    "(python -m producers.deadletters lists and re-drives them).",
    ["source_topic", "code"],
    registry=REGISTRY,
)

# ---- inference: the engine (the infrastructure layer) -----------------------------------------
ENGINE_RUNNING = Gauge(
    "vllm:num_requests_running",
    "Requests in the engine's decode batch.",
    ["model_name", "pool", "worker"],
    registry=REGISTRY,
)
ENGINE_WAITING = Gauge(
    "vllm:num_requests_waiting",
    "Requests waiting for a place in the batch.",
    ["model_name", "pool", "worker"],
    registry=REGISTRY,
)
KV_CACHE_USAGE = Gauge(
    "vllm:kv_cache_usage_perc",
    "Share of the KV cache in use (0..1).",
    ["model_name", "pool", "worker"],
    registry=REGISTRY,
)
PREFIX_CACHE = Counter(
    "turnstream_prefix_cache_tokens_total",
    "Prompt tokens looked up in the engine's prefix cache, by result (hit, miss).",
    ["pool", "result"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "turnstream_worker_queue_depth",
    "Turns taken from Kafka and not yet in the engine.",
    ["role", "pool"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "turnstream_worker_turns_in_flight",
    "Turns a worker holds (queued or generating).",
    ["role", "pool"],
    registry=REGISTRY,
)

# ---- Kafka consumers ----------------------------------------------------------------------
CONSUMER_LAG = Gauge(
    "turnstream_consumer_lag_records",
    "Records of a partition not yet taken by the consumer (high watermark - position).",
    ["group", "topic", "partition"],
    registry=REGISTRY,
)

# ---- safety and caches (the quality layer's live side) ------------------------------------
SAFETY_TRIGGERS = Counter(
    "turnstream_safety_triggers_total",
    "Safety decisions that stopped or changed something, by stage and action.",
    ["stage", "action"],
    registry=REGISTRY,
)
CACHE_LOOKUPS = Counter(
    "turnstream_cache_lookups_total",
    "Cache lookups by cache and result (hit, miss).",
    ["cache", "result"],
    registry=REGISTRY,
)

# ---- the edge ----------------------------------------------------------------------------
EDGE_CONNECTIONS = Gauge(
    "turnstream_edge_connections", "Open WebSocket connections.", registry=REGISTRY
)
EDGE_FRAMES = Counter(
    "turnstream_edge_frames_total",
    "Frames written to clients (joined deltas count once).",
    registry=REGISTRY,
)
EDGE_SLOW_CLOSED = Counter(
    "turnstream_edge_slow_clients_closed_total",
    "Connections closed for falling too far behind (1013).",
    registry=REGISTRY,
)
EDGE_HTTP_REQUESTS = Counter(
    "turnstream_edge_http_requests_total",
    "Requests to the edge's HTTP door, by route and status.",
    ["route", "status"],
    registry=REGISTRY,
)
EDGE_RESUMES = Counter(
    "turnstream_edge_resumes_total",
    "response.resume answers, by status (resumed, restarted, expired, refused).",
    ["status"],
    registry=REGISTRY,
)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def bearer_guard(app: WsgiApp, token: str) -> WsgiApp:
    """`app` behind a bearer token: 401 with a plain reason for anything else."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode()
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        headers = [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')]
        start_response("401 Unauthorized", headers)
        return [b"metrics need the bearer token (TURNSTREAM_METRICS_TOKEN)\n"]

    return guarded


def serve_metrics(port: int, host: str = "127.0.0.1", token: str = "") -> None:
    """Start the scrape endpoint (a daemon thread); port 0 leaves it off."""
    if not port:
        return
    app = make_wsgi_app(REGISTRY)
    if token:
        app = bearer_guard(app, token)

    class Server(ThreadingWSGIServer):
        pass  # its own class: the address family (IPv4 or IPv6) is set per server

    Server.address_family, host = _get_best_family(host, port)
    server = make_server(host, port, app, Server, handler_class=_SilentHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
