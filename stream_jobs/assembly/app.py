"""The assembly job: faust agent over `turns.enriched` + `turns.completed`, one table.

Each assembled turn is routed (`routing`: a pool by meaning, a worker of that pool by its
load and prefix cache) and written once, to the chosen pool's topic `inference.<pool>` at the
chosen worker's partition (or to `images.requested`): the work, and the turn's record of how
its prompt was built (the events log reads it there; the worker copies the assembly onto
the turn's completion, where the trace reads it).

Both topics it reads are keyed by conversation and have the same partition count, so one
agent sees a conversation's turns and completions in order on one partition, and the table
row of that conversation lives with them (its changelog partition is the events' partition).
Processing is at-least-once: a redelivered event finds its effect in the table and is not
applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import Any

import faust
import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from runtime.prometheus import DEAD_LETTERS_SENT
from runtime.redis import redis_client
from runtime.settings import Settings
from runtime.tracing import spans
from runtime.tracing.propagation import from_traceparent, incoming_context
from runtime.tracing.spans import consuming, producing
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import (
    ErrorInfo,
    PromptContext,
    Role,
    Route,
    TurnAssembled,
    TurnCompleted,
    TurnEnriched,
    TurnTruncated,
)
from schemas.ids import now_ms
from schemas.prefix import cache_salt
from schemas.tools import result_text
from schemas.topics import (
    DEAD_LETTERS,
    IMAGES_REQUESTED,
    TURNS_COMPLETED,
    TURNS_ENRICHED,
    pool_topic,
)
from stream_jobs.assembly.cache.answer_cache import AnswerCache
from stream_jobs.assembly.cache.semantic_cache import CacheHit
from stream_jobs.assembly.prompt import (
    Passage,
    assemble,
    carried_history,
    history_block_tokens,
    with_image_placeholders,
    with_instructions,
    with_tools,
)
from stream_jobs.assembly.retrieval import Retriever
from stream_jobs.assembly.routing.endpoint_picker import EndpointPicker
from stream_jobs.assembly.routing.kv_lookup import KvLookup
from stream_jobs.assembly.routing.route import IMAGE_POOL, Intent, IntentRouter, Routing
from stream_jobs.assembly.routing.worker_board import WorkerBoard
from stream_jobs.assembly.state import (
    ConversationState,
    Decision,
    HistoryLimits,
    StoredMessage,
    decode_state,
    encode_state,
    on_completed,
    on_enriched,
    on_stale,
    on_truncated,
)
from stream_jobs.assembly.tokens import TokenCounter
from stream_jobs.assembly.tool_results import named, stale_error
from stream_jobs.faust_app import make_app

log = logging.getLogger("turnstream.assembly")

NO_IMAGE_WORKER = ErrorInfo(
    "image_generation_unavailable",
    "Image generation is not available right now (no image worker is running); try again later.",
    retryable=True,
)
MAX_PROFILE_CHARS = 1000
PROFILE_TIMEOUT_S = 0.2  # a slow profile store costs the turn its profile, not its latency


@dataclass(frozen=True, slots=True)
class AssemblyConfig:
    persona: str
    max_model_len: int
    max_held: int
    stale_after_ms: float
    idle_expiry_ms: float
    history: HistoryLimits
    rag_top_k: int
    prefix_cache_per_tenant: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> AssemblyConfig:
        return cls(
            persona=settings.system_prompt,
            max_model_len=settings.max_model_len,
            max_held=settings.max_queued_per_conversation,
            stale_after_ms=settings.stale_turn_s * 1000,
            idle_expiry_ms=settings.history_ttl_s * 1000,
            history=HistoryLimits(
                settings.history_max_messages, settings.history_max_chars, settings.history_block
            ),
            rag_top_k=settings.rag_top_k,
            prefix_cache_per_tenant=settings.prefix_cache_per_tenant,
        )


def create_app(settings: Settings) -> faust.App:
    return make_app(settings, "assembly")


class AssemblyJob:
    def __init__(
        self,
        app: faust.App,
        settings: Settings,
        *,
        count_tokens: TokenCounter,
        retriever: Retriever | None,
        intents: IntentRouter | None = None,
        answers: AnswerCache | None = None,
        chat_tokenizer: Any | None = None,
    ) -> None:
        """`chat_tokenizer`: the served model's tokenizer with its chat template; with it the
        router asks the workers that follow their engine's KV cache which blocks of each
        prompt they hold (`routing.kv_lookup`)."""
        ns = settings.namespace
        self.app = app
        self.config = AssemblyConfig.from_settings(settings)
        self.count_tokens = count_tokens
        self.retriever = retriever
        self.answers = answers
        self.names = RedisNames.for_namespace(ns)
        self._redis_url = settings.redis_url
        self._redis: Redis | None = None
        self.source = app.topic(TURNS_ENRICHED.full_name(ns), TURNS_COMPLETED.full_name(ns))
        pools = settings.pool_names
        self.pool_topics = {pool: app.topic(pool_topic(pool).full_name(ns)) for pool in pools}
        self.images = app.topic(IMAGES_REQUESTED.full_name(ns))  # picture requests
        board = kv_lookup = None
        if settings.worker_state_interval_ms > 0:
            board = WorkerBoard(lambda: self.redis, self.names, clock_ms=now_ms)
            if chat_tokenizer is not None:
                kv_lookup = KvLookup(lambda: self.redis, self.names, chat_tokenizer)
        self.routing = Routing(
            pools=pools,
            intents=intents,
            board=board,
            picker=EndpointPicker(settings.routing_strategy, ttl_ms=settings.worker_state_ttl_ms),
            clock_ms=now_ms,
            kv_lookup=kv_lookup,
        )
        self.deadletters = app.topic(DEAD_LETTERS.full_name(ns))
        # bytes → raw changelog serializers (faust's json default cannot read our rows back)
        self.table = app.Table(
            "conversations",
            partitions=TURNS_ENRICHED.partitions,
            key_type=bytes,
            value_type=bytes,
        )
        self._current_turn = ""  # the turn of the record being processed (tracing)
        app.agent(self.source, name="assemble")(self._consume)  # type: ignore[arg-type]  # faust's stubs want StreamT

    @property
    def redis(self) -> Redis:
        if self._redis is None:  # created on the worker's loop, at first use
            self._redis = redis_client(self._redis_url)
        return self._redis

    async def _consume(self, stream: faust.Stream) -> None:
        async for event in stream.events():
            payload = event.value
            try:
                parsed = decode(payload)
            except DecodeError as err:
                await self._dead_letter(payload, event.message.topic, err)
                continue
            message = event.message
            self._current_turn = parsed.turn_id
            with consuming(
                message.topic,
                parent=incoming_context(event.headers, parsed),
                turn_id=parsed.turn_id,
                partition=message.partition,
                offset=message.offset,
                group=self.app.conf.id,
            ):
                if isinstance(parsed, TurnEnriched):
                    await self._on_enriched(parsed)
                elif isinstance(parsed, TurnCompleted):
                    await self._on_completed(parsed)
                elif isinstance(parsed, TurnTruncated):
                    self._on_truncated(parsed)

    # ---- transitions -----------------------------------------------------------------------
    async def _on_enriched(self, turn: TurnEnriched) -> None:
        key = _key(turn.submitted.tenant_id, turn.submitted.conversation_id)
        state = decode_state(self.table.get(key))
        for truncation in turn.submitted.truncates:  # before this turn's prompt is built
            on_truncated(state, truncation, count_tokens=self.count_tokens)
        now = now_ms()
        stale = on_stale(state, now_ms=now, stale_after_ms=self.config.stale_after_ms)
        decision = on_enriched(
            state,
            turn,
            now_ms=now,
            max_held=self.config.max_held,
            idle_expiry_ms=self.config.idle_expiry_ms,
        )
        await self._carry_out(key, state, _merge(stale, decision))

    async def _on_completed(self, completed: TurnCompleted) -> None:
        key = _key(completed.tenant_id, completed.conversation_id)
        raw = self.table.get(key)
        if raw is None:
            return  # ended before assembly, in a conversation assembly never saw
        state = decode_state(raw)
        user_text, cache_query = "", ""
        if state.in_flight is not None and state.in_flight.turn_id == completed.turn_id:
            user_text, cache_query = _query(state.in_flight, state.open_calls), state.cache_query
            state.cache_query = ""
        if cache_query and self.answers is not None:
            await self.answers.remember(completed.tenant_id, cache_query, completed)
        decision = on_completed(
            state,
            completed,
            user_text=user_text,
            count_tokens=self.count_tokens,
            limits=self.config.history,
            now_ms=now_ms(),
        )
        await self._carry_out(key, state, decision)

    def _on_truncated(self, truncated: TurnTruncated) -> None:
        key = _key(truncated.tenant_id, truncated.conversation_id)
        raw = self.table.get(key)
        if raw is None:
            return
        state = decode_state(raw)
        on_truncated(state, truncated.truncation, count_tokens=self.count_tokens)
        self.table[key] = encode_state(state)

    async def _carry_out(self, key: bytes, state: ConversationState, decision: Decision) -> None:
        for turn in decision.release:
            with self._in_trace_of(turn):
                await self._emit(turn, state)
        for turn, error in decision.refuse:
            await self._refuse(turn, error)
        self.table[key] = encode_state(state)

    def _in_trace_of(self, turn: TurnEnriched):
        """Where a released turn is assembled: in the current span (its own record's
        processing) or, for a turn held back until an earlier one of its conversation ended,
        in an `assemble` span of that turn's own trace, linked to what released it."""
        if turn.turn_id == self._current_turn:
            return contextlib.nullcontext()
        parent = from_traceparent(turn.submitted.traceparent)
        return spans.held_turn("assemble", turn.turn_id, parent=parent)

    # ---- assembly --------------------------------------------------------------------------
    async def _emit(self, turn: TurnEnriched, state: ConversationState) -> None:
        submitted = turn.submitted
        if submitted.tool_results and submitted.history is None:
            stale = stale_error(submitted.tool_results, state.open_calls)
            if stale is not None:
                await self._refuse(turn, stale)
                return
        query = _query(turn, state.open_calls)
        history = (
            state.messages
            if submitted.history is None
            else carried_history(submitted.history, self.count_tokens)
        )
        intent = await self._intent(turn, state, history)
        if intent.pool == IMAGE_POOL and not await self.routing.image_workers_live():
            reason = f"{intent.reason}; no live image worker"
            route = Route(self.routing.default_pool, intent=intent.intent, reason=reason)
            await self._refuse(turn, NO_IMAGE_WORKER, route)
            return
        state.last_pool, state.last_intent = intent.pool, intent.intent
        profile, passages = await asyncio.gather(
            self._profile(submitted.tenant_id, submitted.user_id),
            self._retrieve(turn.text) if intent.retrieval else _nothing(),
        )
        answer_room = min(submitted.decoding.max_tokens, self.config.max_model_len // 2)
        budget_tokens = self.config.max_model_len - answer_room
        messages, context = assemble(
            # a canary arm's own persona, then the client's system message (HTTP door)
            persona=with_tools(
                with_instructions(submitted.persona or self.config.persona, submitted.instructions),
                submitted.tools,
                submitted.tool_choice,
            ),
            profile=profile,
            passages=passages,
            history=history,
            query=query,
            budget_tokens=budget_tokens,
            count_tokens=self.count_tokens,
            language=turn.language,
            history_block_tokens=history_block_tokens(budget_tokens, self.config.history.block),
        )
        state.turns += 1
        if context.dropped_messages:
            state.truncated_turns += 1
        key = submitted.conversation_id.encode()
        in_flight = state.in_flight is not None and state.in_flight.turn_id == turn.turn_id
        pinned = state.in_flight_route if in_flight else None
        salt = cache_salt(submitted.tenant_id, self.config.prefix_cache_per_tenant)
        route = pinned or await self.routing.place(intent, messages, key, salt)
        if in_flight:
            state.in_flight_route = route
        # the cache holds free-text answers to the deployment's persona: never for an arm's
        # own, never pictures, never an answer held to a response format
        uncached = (
            submitted.persona
            or submitted.instructions
            or intent.pool == IMAGE_POOL
            or submitted.decoding.response_format is not None
            or bool(submitted.tools or submitted.tool_results)
        )
        cached = (
            None if uncached else await self._cached(turn, state, len(history), profile, passages)
        )
        if cached is not None:
            route = msgspec.structs.replace(
                route, cache_hit=True, cache_similarity=round(cached.score, 4)
            )
        at = now_ms()
        assembled = TurnAssembled(
            turn_id=turn.turn_id,
            submitted=submitted,
            messages=messages,
            context=msgspec.structs.replace(context, assembled_at_ms=at),  # on to the trace
            assembled_at_ms=at,
            images=turn.images,
            language=turn.language,
            preprocess_ms=turn.preprocess_ms,
            screening=turn.screening,
            route=route,
            cached_answer=cached.answer if cached is not None else "",
        )
        await self._send(assembled)

    async def _cached(
        self,
        turn: TurnEnriched,
        state: ConversationState,
        history_messages: int,
        profile: str,
        passages: list[Passage],
    ) -> CacheHit | None:
        """The cache's answer to a context-free question; on a miss the question is kept so
        its answer is stored when it ends."""
        state.cache_query = ""
        if self.answers is None or not self.answers.eligible(
            turn,
            history_messages=history_messages,
            passages=len(passages),
            profile=bool(profile),
        ):
            return None
        hit = await self.answers.lookup(turn.submitted.tenant_id, turn.text)
        if hit is None:
            state.cache_query = turn.text
        return hit

    async def _intent(
        self, turn: TurnEnriched, state: ConversationState, history: list[StoredMessage]
    ) -> Intent:
        # The classifier costs an embedding (tens of ms on a busy CPU, serial in this job);
        # run it only when its answer can change something: which pool, or whether to
        # retrieve. With one live pool and no retriever the rules are enough.
        classify = self.retriever is not None or await self.routing.live_pools() > 1
        decide = functools.partial(
            self.routing.intent,
            turn.text,
            has_images=bool(turn.images),
            history_turns=state.turns
            if turn.submitted.history is None
            else sum(1 for m in history if m.role == Role.USER),
            forced_pool=turn.submitted.pool,
            classify=classify,
            # a short follow-up stays where the last turn went, except after a picture
            # ("why?" is a question about it, not another picture)
            previous=Intent(state.last_pool, state.last_intent, False, "", 1.0)
            if state.last_pool and state.last_pool != IMAGE_POOL
            else None,
        )
        if self.routing.intents is None:
            return decide()
        return await asyncio.to_thread(decide)

    async def _refuse(
        self, turn: TurnEnriched, error: ErrorInfo, route: Route | None = None
    ) -> None:
        """Refusals travel the same way (inference ends the turn without generating)."""
        at = now_ms()
        context = PromptContext(
            history_messages=0, dropped_messages=0, prompt_tokens=0, assembled_at_ms=at
        )
        refused = TurnAssembled(
            turn_id=turn.turn_id,
            submitted=turn.submitted,
            messages=[],
            context=context,
            assembled_at_ms=at,
            error=error,
            route=route
            or Route(pool=self.routing.default_pool, reason="refused: closed by any worker"),
        )
        await self._send(refused)

    async def _send(self, assembled: TurnAssembled) -> None:
        """To the pool's topic at the picked worker's partition (the only record of it)."""
        key = assembled.submitted.conversation_id.encode()
        value = encode(assembled)
        route = assembled.route
        assert route is not None
        partition = route.partition if route.partition >= 0 else None
        # a picture request goes to the image workers (any of them: Kafka's key hashing)
        pool_topic = self.images if route.pool == IMAGE_POOL else self.pool_topics[route.pool]
        with producing(pool_topic.get_topic_name(), turn_id=assembled.turn_id) as headers:
            await pool_topic.send(key=key, value=value, partition=partition, headers=headers)

    async def _profile(self, tenant_id: str, user_id: str) -> str:
        try:
            async with asyncio.timeout(PROFILE_TIMEOUT_S):
                raw = await self.redis.get(self.names.profile_key(tenant_id, user_id))
        except (RedisError, TimeoutError) as err:
            log.warning("profile of %s/%s unavailable: %r", tenant_id, user_id, err)
            return ""
        if isinstance(raw, bytes):
            raw = raw.decode(errors="replace")
        return raw[:MAX_PROFILE_CHARS] if raw else ""

    async def _retrieve(self, text: str) -> list[Passage]:
        if self.retriever is None or not text.strip():
            return []
        return await asyncio.to_thread(self.retriever.search, text, self.config.rag_top_k)

    async def _dead_letter(self, payload: bytes, topic: str, err: DecodeError) -> None:
        log.warning("dead-lettering a message from %s: %s", topic, err)
        headers = {
            "source_topic": topic.encode(),
            "error_code": err.code.encode(),
            "error": str(err)[:500].encode(),
        }
        await self.deadletters.send(key=topic.encode(), value=payload, headers=headers)
        DEAD_LETTERS_SENT.labels(topic, err.code).inc()


async def _nothing() -> list[Passage]:
    return []


def _key(tenant_id: str, conversation_id: str) -> bytes:
    """Tenants never share a conversation row (tenant ids hold no '/')."""
    return f"{tenant_id}/{conversation_id}".encode()


def _query(turn: TurnEnriched, open_calls: dict[str, str] | None = None) -> str:
    """The user message as the model reads it: the results of the previous answer's tool
    calls first (when the turn returns some, named after the calls they answer), then the
    text with its image placeholders."""
    text = with_image_placeholders(turn.text, len(turn.images))
    results = named(turn.submitted.tool_results, open_calls or {})
    return "\n".join(part for part in (result_text(results) if results else "", text) if part)


def _merge(first: Decision, second: Decision) -> Decision:
    return Decision(first.release + second.release, first.refuse + second.refuse)
