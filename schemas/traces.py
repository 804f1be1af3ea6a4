"""The analysts' trace row: one per turn, joined from the turn's events (pure).

A turn leaves `turn.submitted`, `turn.enriched`, `turn.assembled` and `turn.completed` in
Kafka; `build_trace` folds whichever of them arrived into one wide row for ClickHouse
`traces` (see `runtime/clickhouse/migrations/0002_traces.sql` for the columns' meaning). A turn
whose completion never came is closed with `status = 'timed_out'` by whoever gives up on it.
The column order of `TRACE_COLUMNS` is the insert order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.events import (
    MediaKind,
    PromptContext,
    Route,
    Screening,
    TurnCompleted,
    TurnSubmitted,
)
from schemas.stats import percentile
from schemas.traceparent import trace_id_of


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens, by model; unknown models cost `default` (an estimate)."""

    per_million: dict[str, tuple[float, float]] = field(default_factory=dict)
    default: tuple[float, float] = (0.0, 0.0)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        prompt, completion = self.per_million.get(model, self.default)
        return (prompt_tokens * prompt + completion_tokens * completion) / 1_000_000


@dataclass(frozen=True, slots=True)
class TraceRow:
    turn_id: str
    conversation_id: str
    tenant_id: str
    user_id: str
    client: str
    status: str  # completed | timed_out
    model: str
    worker_id: str
    engine_options: str  # the engine's options tag ('' for engines without): migration 0013
    pool: str
    intent: str
    route_reason: str
    routing_strategy: str
    routed_worker: str
    prefix_chars: int
    prefix_tokens: int  # of the prompt the routed worker's engine held, from KV events (0022)
    tier: str
    degraded: int
    cache_hit: int
    cache_similarity: float
    has_text: int
    image_count: int
    audio_count: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    history_messages: int
    dropped_messages: int
    retrieved: list[str]
    profile_used: int
    preprocess_ms: float
    queue_ms: float
    ttft_ms: float | None
    e2e_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    itl_max_ms: float
    itl_ms: list[float]
    finish_reason: str
    error_code: str
    input_safety: str  # allow | block; "" when not screened
    safety_labels: list[str]
    screen_ms: float
    safety_error: str
    output_policy: str  # optimistic | hold_back; "" when answers were not checked
    windows_checked: int
    cut_window: int  # -1: not cut
    unaudited: int  # 1: a verdict never came (optimistic went on without it)
    hold_max_ms: float
    cost_usd: float
    run_id: str  # the replay run ('' for live traffic)
    arm: str  # the canary arm ('' when no experiment ran)
    trace_id: str  # the turn's OpenTelemetry trace ('' when not traced; runtime/tracing)
    # a generated image (workers/imagegen; '' / 0 for text answers): migration 0014
    image_prompt: str
    image_width: int
    image_height: int
    image_steps: int
    image_steps_done: int
    image_seed: int
    image_generate_ms: float
    image_notice: str
    language: str  # ISO 639-1: spoken (the ASR's), else typed (lid.176); '' unknown: 0017
    language_source: str  # 'speech' | 'text' | '': where `language` came from (0021)
    # structured output and function calling (docs/tools.md): migration 0018
    response_format: str  # '' | json_object | json_schema
    tools_offered: int
    tool_choice: str  # '' (no tools) | none | auto | required | named
    tool_calls: list[str]  # the called tools' names, in order
    tool_call_ids: list[str]
    tool_arguments_bytes: int
    tool_result_ids: list[str]  # the calls whose results this turn returned
    # the deployment's tools (workers/tools), aligned with tool_result_ids ('' / 0 for a
    # result the client returned): how each call ran; migration 0019
    tool_result_outcomes: list[str]  # ok, tool_error, tool_timeout, tool_outcome_unknown, ...
    tool_result_ms: list[float]
    tool_result_replayed: list[int]  # 1: the books held it (a redelivery): not run again
    tool_result_keys: list[str]  # the idempotency key each call ran under
    tool_round: int  # 0: the user's turn; n: the n-th continuation after the tools ran
    continued_by: str  # the turn that returned this answer's server tool results
    # where the turn was, and its time hop by hop (`latency_hops`): migration 0020
    edge_id: str  # the edge node that accepted it and relayed its answer
    image_cache_hits: int  # of its images, those the preprocessing cache held
    hop_preprocess_ms: float  # accepted → out of preprocessing (a spoken turn: its ASR)
    hop_assembly_ms: float  # → assembled (history, retrieval, routing)
    hop_queue_ms: float  # → its engine started on it (Kafka, the worker's queue)
    hop_prefill_ms: float  # → first token
    hop_decode_ms: float  # → last token; the five add up to e2e_ms
    # a voice-loop turn: its end of speech → accepted, the end-of-turn wait before the five
    # hops (0: typed or a clip; migration 0021; `speech_hops` adds the first audio)
    hop_endpointing_ms: float
    submitted_at: datetime
    completed_at: datetime

    def values(self) -> tuple:
        return tuple(getattr(self, name) for name in TRACE_COLUMNS)


TRACE_COLUMNS = tuple(f.name for f in dataclasses.fields(TraceRow))


def build_trace(
    submitted: TurnSubmitted,
    *,
    preprocess_ms: float = 0.0,
    context: PromptContext | None = None,
    completed: TurnCompleted | None = None,
    closed_at_ms: float | None = None,
    prices: Prices | None = None,
    screening: Screening | None = None,
    route: Route | None = None,
    language: str = "",
    text_language: str = "",
    enriched_at_ms: float = 0.0,
    image_cache_hits: int = 0,
) -> TraceRow:
    """The trace of a turn from what is known about it (`preprocess_ms` from its
    `turn.enriched`, `context` from its `turn.assembled`). Without `completed`, the turn is
    `timed_out` at `closed_at_ms` (required then)."""
    media = submitted.media
    checked = completed.output_safety if completed is not None else None
    image = completed.image if completed is not None else None
    calls = completed.tool_calls if completed is not None else []
    fmt = submitted.decoding.response_format
    if completed is None:
        if closed_at_ms is None:
            raise ValueError("a turn without turn.completed needs closed_at_ms")
        end_ms = closed_at_ms
        status, finish, error, model, worker = "timed_out", "", "timed_out", "", ""
        usage = (0, 0, 0)
        queue_ms = e2e_ms = max(0.0, end_ms - submitted.submitted_at_ms)
        ttft, gaps = None, []
    else:
        end_ms = completed.completed_at_ms
        status, finish = "completed", str(completed.finish_reason)
        error = completed.error.code if completed.error is not None else ""
        model, worker = completed.model, completed.worker_id
        u = completed.usage
        usage = (u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens)
        t = completed.timings
        queue_ms, e2e_ms, ttft, gaps = t.queue_ms, t.e2e_ms, t.ttft_ms, list(t.itl_ms)
    return TraceRow(
        turn_id=submitted.turn_id,
        conversation_id=submitted.conversation_id,
        tenant_id=submitted.tenant_id,
        user_id=submitted.user_id,
        client=submitted.client,
        status=status,
        model=model,
        worker_id=worker,
        engine_options=completed.engine_options if completed is not None else "",
        pool=route.pool if route else submitted.pool,
        intent=route.intent if route else "",
        route_reason=route.reason if route else "",
        routing_strategy=route.strategy if route else "",
        routed_worker=route.worker_id if route else "",
        prefix_chars=route.prefix_chars if route else 0,
        prefix_tokens=route.prefix_tokens if route else 0,
        tier=submitted.tier,
        degraded=int(submitted.degraded),
        cache_hit=int(route.cache_hit) if route else 0,
        cache_similarity=route.cache_similarity if route else 0.0,
        has_text=int(bool(submitted.text.strip())),
        image_count=sum(1 for m in media if m.kind == MediaKind.IMAGE),
        audio_count=sum(1 for m in media if m.kind == MediaKind.AUDIO),
        prompt_tokens=usage[0],
        completion_tokens=usage[1],
        cached_prompt_tokens=usage[2],
        history_messages=context.history_messages if context else 0,
        dropped_messages=context.dropped_messages if context else 0,
        retrieved=list(context.retrieved) if context else [],
        profile_used=int(context.profile) if context else 0,
        preprocess_ms=preprocess_ms,
        queue_ms=queue_ms,
        ttft_ms=ttft,
        e2e_ms=e2e_ms,
        itl_p50_ms=percentile(gaps, 50),
        itl_p99_ms=percentile(gaps, 99),
        itl_max_ms=max(gaps) if gaps else 0.0,
        itl_ms=gaps,
        finish_reason=finish,
        error_code=error,
        input_safety=str(screening.action) if screening else "",
        safety_labels=list(screening.labels) if screening else [],
        screen_ms=screening.elapsed_ms if screening else 0.0,
        safety_error=screening.error if screening else "",
        output_policy=checked.policy if checked else "",
        windows_checked=checked.windows if checked else 0,
        cut_window=checked.cut_window if checked else -1,
        unaudited=int(checked.unaudited) if checked else 0,
        hold_max_ms=checked.max_hold_ms if checked else 0.0,
        cost_usd=(prices or Prices()).cost(model, usage[0], usage[1]),
        run_id=submitted.run_id,
        arm=submitted.arm,
        trace_id=trace_id_of(submitted.traceparent),
        image_prompt=image.prompt if image else "",
        image_width=image.width if image else 0,
        image_height=image.height if image else 0,
        image_steps=image.steps if image else 0,
        image_steps_done=image.steps_done if image else 0,
        image_seed=image.seed if image else 0,
        image_generate_ms=image.generate_ms if image else 0.0,
        image_notice=image.notice if image else "",
        language=language or text_language,
        language_source="speech" if language else ("text" if text_language else ""),
        response_format=str(fmt.type) if fmt is not None else "",
        tools_offered=len(submitted.tools),
        tool_choice=_tool_choice(submitted),
        tool_calls=[c.name for c in calls],
        tool_call_ids=[c.call_id for c in calls],
        tool_arguments_bytes=sum(len(c.arguments.encode()) for c in calls),
        tool_result_ids=[r.call_id for r in submitted.tool_results],
        tool_result_outcomes=[r.run.outcome if r.run else "" for r in submitted.tool_results],
        tool_result_ms=[r.run.duration_ms if r.run else 0.0 for r in submitted.tool_results],
        tool_result_replayed=[int(r.run.replayed) if r.run else 0 for r in submitted.tool_results],
        tool_result_keys=[r.run.idempotency_key if r.run else "" for r in submitted.tool_results],
        tool_round=submitted.tool_round,
        continued_by=completed.continued_by if completed is not None else "",
        edge_id=submitted.edge_id,
        image_cache_hits=image_cache_hits,
        **latency_hops(
            submitted.submitted_at_ms,
            enriched_at_ms=enriched_at_ms,
            assembled_at_ms=context.assembled_at_ms if context else 0.0,
            queue_ms=queue_ms,
            ttft_ms=ttft,
            e2e_ms=e2e_ms,
        ),
        hop_endpointing_ms=endpointing_ms(submitted),
        submitted_at=_utc(submitted.submitted_at_ms),
        completed_at=_utc(end_ms),
    )


def endpointing_ms(submitted: TurnSubmitted) -> float:
    """How long after the user stopped talking the edge accepted the turn (the silence rule
    or the turn model deciding); 0 when the end of speech is not known (typed, a clip)."""
    if not submitted.speech_ended_at_ms:
        return 0.0
    return round(max(0.0, submitted.submitted_at_ms - submitted.speech_ended_at_ms), 3)


def latency_hops(
    submitted_at_ms: float,
    *,
    enriched_at_ms: float,
    assembled_at_ms: float,
    queue_ms: float,
    ttft_ms: float | None,
    e2e_ms: float,
) -> dict[str, float]:
    """A turn's end-to-end time cut at its marks: out of preprocessing, assembled (wall
    clocks), generation started, first token (offsets from acceptance). The hops add up to
    `e2e_ms` exactly: each mark is held between its neighbours (clocks of different hosts
    may disagree by a little), and a mark not known (0, None) gives its hop 0, the next
    hop taking its time."""
    end = max(e2e_ms, 0.0)

    def held(mark: float, low: float, high: float) -> float:
        return min(max(mark, low), high)

    started = held(queue_ms, 0.0, end)
    preprocessed = held(enriched_at_ms - submitted_at_ms, 0.0, started) if enriched_at_ms else 0.0
    assembled = (
        held(assembled_at_ms - submitted_at_ms, preprocessed, started)
        if assembled_at_ms
        else preprocessed
    )
    first = held(ttft_ms, started, end) if ttft_ms is not None else end
    marks = [round(mark, 3) for mark in (0.0, preprocessed, assembled, started, first, end)]
    names = ("preprocess", "assembly", "queue", "prefill", "decode")
    return {f"hop_{name}_ms": marks[i + 1] - marks[i] for i, name in enumerate(names)}


def _utc(epoch_ms: float) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def _tool_choice(submitted: TurnSubmitted) -> str:
    if not submitted.tools:
        return ""
    return str(submitted.tool_choice.mode) if submitted.tool_choice else "auto"
