"""Events → rows of ClickHouse `turns` (migration 0001), `traces` (0002), `feedback` (0004)
and `worker_metrics` (0006), with the checks
that keep absurd values out of the analysts' tables (pure). A rejected event goes to the
dead-letter topic with the reason; the sink keeps going."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import FeedbackGiven, TraceRecorded, TurnCompleted, WorkerMetrics
from schemas.traces import Prices, build_trace
from workers.sink.errors import SinkError

TURN_COLUMNS = (
    "turn_id",
    "conversation_id",
    "tenant_id",
    "user_id",
    "model",
    "worker_id",
    "finish_reason",
    "error_code",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "itl_ms",
    "text",
    "completed_at",
)
MAX_TEXT_BYTES = 1024 * 1024
EARLIEST_MS = datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1000
FUTURE_SLACK_MS = 24 * 3600 * 1000


class RowRejected(SinkError, ValueError):
    code = "invalid_row"


def plausible_time(at_ms: float, now_ms: float) -> bool:
    return EARLIEST_MS <= at_ms <= now_ms + FUTURE_SLACK_MS


def check_completed(event: TurnCompleted, *, now_ms: float) -> None:
    """Refuse absurd values (they would skew every percentile analysts compute)."""
    t, u = event.timings, event.usage
    problems = []
    if min(t.queue_ms, t.e2e_ms, *(t.itl_ms or [0.0])) < 0 or (t.ttft_ms or 0) < 0:
        problems.append("negative latency")
    if min(u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens) < 0:
        problems.append("negative token count")
    if len(event.text.encode()) > MAX_TEXT_BYTES:
        problems.append(f"text over {MAX_TEXT_BYTES} bytes")
    if not plausible_time(event.completed_at_ms, now_ms):
        problems.append(f"completed_at_ms {event.completed_at_ms:.0f} is not a plausible time")
    if problems:
        raise RowRejected("; ".join(problems))


def turn_row(event: TurnCompleted, *, now_ms: float) -> tuple:
    check_completed(event, now_ms=now_ms)
    t, u = event.timings, event.usage
    return (
        event.turn_id,
        event.conversation_id,
        event.tenant_id,
        event.user_id,
        event.model,
        event.worker_id,
        str(event.finish_reason),
        event.error.code if event.error is not None else "",
        u.prompt_tokens,
        u.completion_tokens,
        u.cached_prompt_tokens,
        t.queue_ms,
        t.ttft_ms,
        t.e2e_ms,
        list(t.itl_ms),
        event.text,
        datetime.fromtimestamp(event.completed_at_ms / 1000, tz=UTC),
    )


def trace_row(event: TraceRecorded, *, now_ms: float, prices: Prices | None = None) -> tuple:
    if event.completed is not None:
        check_completed(event.completed, now_ms=now_ms)
    elif not plausible_time(event.closed_at_ms, now_ms):
        raise RowRejected(f"closed_at_ms {event.closed_at_ms:.0f} is not a plausible time")
    return build_trace(
        event.submitted,
        preprocess_ms=event.preprocess_ms,
        context=event.context,
        completed=event.completed,
        closed_at_ms=event.closed_at_ms,
        prices=prices,
        screening=event.screening,
        route=event.route,
        language=event.language,
        text_language=event.text_language,
        enriched_at_ms=event.enriched_at_ms,
        image_cache_hits=event.image_cache_hits,
    ).values()


FEEDBACK_COLUMNS = (
    "turn_id",
    "conversation_id",
    "tenant_id",
    "user_id",
    "kind",
    "comment",
    "given_at",
    "inferred",
)


def feedback_row(event: FeedbackGiven, *, now_ms: float) -> tuple:
    if not plausible_time(event.given_at_ms, now_ms):
        raise RowRejected(f"given_at_ms {event.given_at_ms:.0f} is not a plausible time")
    return (
        event.turn_id,
        event.conversation_id,
        event.tenant_id,
        event.user_id,
        str(event.kind),
        event.comment,
        datetime.fromtimestamp(event.given_at_ms / 1000, tz=UTC),
        int(event.inferred),
    )


WORKER_METRICS_COLUMNS = (
    "worker_id",
    "pool",
    "model",
    "at",
    "interval_ms",
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "queue_depth",
    "in_flight",
)
_COUNTS = (
    "running",
    "waiting",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "queue_depth",
    "in_flight",
)
MAX_COUNT = 2**32 - 1  # the columns are UInt32
MAX_INTERVAL_MS = 24 * 3600 * 1000.0


def worker_metrics_row(event: WorkerMetrics, *, now_ms: float) -> tuple:
    """Refuse samples no engine can produce (they would skew every average of the
    infrastructure views): usage outside 0..1, negative or overflowing counts, more
    prefix-cache hits than lookups, an absurd interval or time."""
    problems = []
    if not event.worker_id:
        problems.append("no worker_id")
    if not 0.0 <= event.kv_cache_usage <= 1.0:  # NaN fails too
        problems.append(f"kv_cache_usage {event.kv_cache_usage} outside 0..1")
    bad = [c for c in _COUNTS if not 0 <= getattr(event, c) <= MAX_COUNT]
    if bad:
        problems.append(f"negative or overflowing counts: {', '.join(bad)}")
    if event.prefix_cache_hits > event.prefix_cache_queries:
        problems.append("more prefix-cache hits than lookups")
    if not 0.0 <= event.interval_ms <= MAX_INTERVAL_MS:
        problems.append(f"interval_ms {event.interval_ms} is not plausible")
    if not plausible_time(event.at_ms, now_ms):
        problems.append(f"at_ms {event.at_ms:.0f} is not a plausible time")
    if problems:
        raise RowRejected("; ".join(problems))
    return (
        event.worker_id,
        event.pool,
        event.model,
        datetime.fromtimestamp(event.at_ms / 1000, tz=UTC),
        event.interval_ms,
        event.running,
        event.waiting,
        event.kv_cache_usage,
        event.prefix_cache_queries,
        event.prefix_cache_hits,
        event.preemptions,
        event.prompt_tokens,
        event.generation_tokens,
        event.queue_depth,
        event.in_flight,
    )
