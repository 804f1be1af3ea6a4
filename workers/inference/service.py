"""The inference service: one turn from Kafka to tokens on the edge's Redis channel.

Per turn (a `turn.assembled` from the pool's topic: the prompt is already built): skip it if
already answered (redelivery) or cancelled; wait for earlier turns of the same conversation
(they share a partition, so they are here); stream the engine's deltas to the edge; then
record the outcome — decide it (claimed in Redis), publish it to Kafka `turns.completed`, mark it
done, relay it to the edge (`workers/runtime/outcome.py`). Every turn ends in exactly one
`turn.completed` (stop, length, cancelled or error).

Cancellation: the control channel names a turn; if this worker runs it, its generation
task is cancelled, which aborts the request inside the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import msgspec
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis
from redis.exceptions import RedisError

from moderation.output_gate import GateConfig, OutputGate
from moderation.windows import Window
from runtime.tracing import spans
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import (
    AnyEvent,
    ErrorInfo,
    FinishReason,
    OutputSafety,
    OutputWindow,
    SafetyVerdict,
    Screening,
    SpeechText,
    TokenChunk,
    TurnAssembled,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
)
from schemas.prefix import PrefixMemory, cache_salt, estimated_tokens, message_chain
from schemas.tools import (
    all_server_calls,
    call_constraint,
    choice_in_force,
    continuation,
    split_calls,
    whole_answer_is_a_call,
)
from workers.inference.engines.engine import Engine, EngineError, GenerationRequest
from workers.inference.gauges import Held, TurnGauges
from workers.inference.images.image_budget import Grant, ImageBudget
from workers.inference.images.pixels import PixelLoader
from workers.inference.metrics import observe_completed
from workers.inference.output_guard import OutputGuard, SafetyStop
from workers.inference.progress import TurnProgress
from workers.inference.replay import replay
from workers.inference.seats import UNLIMITED, EngineSeats, kv_need
from workers.inference.speech.feed import SpeechFeed
from workers.inference.speech.segments import SegmenterConfig
from workers.inference.tool_stream import TEXT, CallSplitter
from workers.runtime.attempt_lease import release_lease, wait_for_live_attempt
from workers.runtime.keyed_locks import KeyedLocks
from workers.runtime.outcome import OutcomeRecorder, final_outcome
from workers.runtime.relay import RelayPublisher
from workers.runtime.work_list import push

log = logging.getLogger("turnstream.inference")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    worker_id: str
    pool: str = "chat"  # its pool: a label of its metrics
    max_queued_per_conversation: int = 8
    output_gate: GateConfig | None = None  # None: answers are not checked while streaming
    # per tier (the turn's, from admission) when it differs from `output_gate`
    tier_gates: Mapping[str, GateConfig | None] = field(default_factory=dict)
    # the safety windows' queue keeps its newest this many (a queue no worker pops is bounded)
    windows_cap: int = 10_000
    speech_topic: str = ""  # Kafka tts.segments: answers asked to be spoken go there
    segments: SegmenterConfig = field(default_factory=SegmenterConfig)
    engine_options: str = ""  # the engine's options tag, recorded in every turn.completed
    prefix_cache_per_tenant: bool = True  # a tenant's prompts reuse only its own cached blocks
    # the engine's batch seats, by tier (`seats.EngineSeats`): 0 seats, no limit here (the
    # worker's fetch limit is the engine's); `reserved` of them only for priority
    # `reserved_priority` and up
    seats: int = 0
    reserved_seats: int = 0
    reserved_priority: int = 10
    kv_headroom: float = 0.0  # of the KV cache, kept from the tiers below that priority

    def gate_for(self, tier: str) -> GateConfig | None:
        return self.tier_gates.get(tier, self.output_gate)


class InferenceService:
    def __init__(
        self,
        *,
        engine: Engine,
        redis: Redis,
        producer: AIOKafkaProducer,
        relay: RelayPublisher,
        outcomes: OutcomeRecorder,
        pixels: PixelLoader,
        image_budget: ImageBudget,
        names: RedisNames,
        config: ServiceConfig,
        clock_ms: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.redis = redis
        self.producer = producer
        self.relay = relay
        self.outcomes = outcomes
        self.pixels = pixels
        self.image_budget = image_budget
        self.names = names
        self.config = config
        self.clock_ms = clock_ms
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancel_requested: set[str] = set()
        self._conversations = KeyedLocks()
        self._guards: dict[str, OutputGuard] = {}  # turns streaming under the safety check
        self._safety_stops: dict[str, SafetyStop] = {}  # turns the safety check stopped
        self._background: set[asyncio.Task] = set()
        self.gauges = TurnGauges()  # queue depth and turns held, for the worker's metrics
        # prompts served lately, as many as the engine's cache holds: the router's hint
        cache_tokens = getattr(engine, "cache_tokens", None)
        self.prefixes = PrefixMemory(max_tokens=cache_tokens)
        self._prefilling: dict[str, int] = {}  # turn -> prompt tokens (estimated) before output
        self.seats = EngineSeats(
            config.seats or UNLIMITED,
            reserved=config.reserved_seats if config.seats else 0,
            reserved_priority=config.reserved_priority,
            low_kv=(
                int((1 - config.kv_headroom) * cache_tokens)
                if config.kv_headroom > 0 and cache_tokens
                else None
            ),
        )
        self._block_size = getattr(engine, "block_size", 1)

    @property
    def prefilling_tokens(self) -> int:
        """Prompt tokens (estimated) of the turns handed to the engine without output yet."""
        return sum(self._prefilling.values())

    # ---- entry points --------------------------------------------------------------------
    async def handle(self, event: AnyEvent) -> None:
        if isinstance(event, TurnAssembled):
            with self.gauges.hold() as ticket:
                await self.run_turn(event, ticket)
        else:
            log.warning("ignoring %s on the turns topic", type(event).__name__)

    def request_cancel(self, turn_id: str) -> bool:
        """Cancel a turn this worker is generating; False when it is not running here."""
        task = self._running.get(turn_id)
        if task is None:
            return False
        self._cancel_requested.add(turn_id)
        task.cancel()
        return True

    async def listen_for_cancels(self) -> None:
        """Follow the control channel (all workers hear every cancel; the owner acts).
        Survives Redis restarts: resubscribes, then re-checks the cancel markers of the
        turns running here, since cancels sent meanwhile were not heard."""
        first = True
        while True:
            try:
                await self._follow_cancels(recheck=not first)
            except RedisError:
                log.warning("control channel lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)
            first = False

    async def _follow_cancels(self, *, recheck: bool) -> None:
        pubsub = self.redis.pubsub()
        try:
            await pubsub.subscribe(
                self.names.control_channel(), self.names.safety_channel(self.config.worker_id)
            )
            if recheck:
                for turn_id in list(self._running):
                    if await self.redis.exists(self.names.cancelled_key(turn_id)):
                        self.request_cancel(turn_id)
            async for message in _messages(pubsub):
                try:
                    event = decode(message)
                except DecodeError as err:
                    log.warning("bad control message: %s", err)
                    continue
                if isinstance(event, TurnCancelled):
                    self.request_cancel(event.turn_id)
                elif isinstance(event, SafetyVerdict):
                    guard = self._guards.get(event.turn_id)
                    if guard is not None:
                        await guard.received(event)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    # ---- one turn ------------------------------------------------------------------------
    async def run_turn(self, assembled: TurnAssembled, ticket: Held | None = None) -> None:
        turn = assembled.submitted
        if assembled.error is not None:  # refused upstream: close it, generate nothing
            await self._finish(TurnProgress(turn, assembled), FinishReason.ERROR, assembled.error)
            return
        held = self._conversations.users(turn.conversation_id)
        if held >= self.config.max_queued_per_conversation:
            await self._refuse_busy(assembled, held)
            return
        async with self._conversations.hold(turn.conversation_id):
            # One round trip for everything the turn needs to know before it starts.
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(self.names.done_key(turn.turn_id))
                pipe.get(self.names.decided_key(turn.turn_id))
                pipe.exists(self.names.cancelled_key(turn.turn_id))
                # the turn's live lease: ours, unless another attempt still streams it
                pipe.set(
                    self.names.turn_live_key(turn.turn_id),
                    self.config.worker_id,
                    nx=True,
                    px=int(self.relay.attempt_lease_s * 1000),
                )
                recorded, decided, cancelled, claimed = await pipe.execute()
            if not claimed and recorded is None and decided is None:
                # handed to us while another worker still streams it: not a failover
                recorded, decided, waited = await wait_for_live_attempt(
                    self.redis,
                    self.names,
                    turn.turn_id,
                    self.config.worker_id,
                    self.relay.attempt_lease_s,
                )
                log.info("turn %s: waited %.1f s for its live attempt", turn.turn_id, waited)
            if (recorded or decided) is not None and await self._replay(turn, recorded, decided):
                return  # inside the lock: a duplicate waits for the original, then replays
            progress = TurnProgress(turn, assembled)
            channel = self.names.edge_channel(turn.edge_id)
            if cancelled:
                await self._finish(progress, FinishReason.CANCELLED)
                return
            choice = choice_in_force(turn.tools, turn.tool_choice)
            decoding = turn.decoding
            if choice is not None:  # the answer may call a tool: held to well-formed calls
                decoding = msgspec.structs.replace(
                    decoding, response_format=call_constraint(turn.tools, choice)
                )
                progress.calls = CallSplitter(whole=whole_answer_is_a_call(choice))
            request = GenerationRequest(
                request_id=turn.turn_id,
                messages=assembled.messages,
                decoding=decoding,
                images=assembled.images,
                priority=turn.priority,
                cache_salt=cache_salt(turn.tenant_id, self.config.prefix_cache_per_tenant),
            )
            model = self.engine.model_name
            with spans.generating(
                model,
                turn_id=turn.turn_id,
                max_tokens=decoding.max_tokens,
                temperature=decoding.temperature,
                top_p=decoding.top_p,
                provider="turnstream.cache" if assembled.cached_answer else "vllm",
            ) as span:
                try:
                    completed = await self._answer(assembled, request, progress, channel, ticket)
                except asyncio.CancelledError:  # stopping: the redelivery need not wait for us
                    await release_lease(self.redis, self.names, turn.turn_id, self.config.worker_id)
                    raise
                spans.record_generation(
                    span,
                    model=completed.model,
                    finish_reason=str(completed.finish_reason),
                    input_tokens=completed.usage.prompt_tokens,
                    output_tokens=completed.usage.completion_tokens,
                    cached_input_tokens=completed.usage.cached_prompt_tokens,
                    error_code=completed.error.code if completed.error is not None else "",
                )

    async def _answer(
        self,
        assembled: TurnAssembled,
        request: GenerationRequest,
        progress: TurnProgress,
        channel: str,
        ticket: Held | None,
    ) -> TurnCompleted:
        """Generate the turn's answer (streamed to the edge) and record its outcome."""
        turn = assembled.submitted
        progress.started_at_ms = self.clock_ms()
        self.relay.publish(
            channel,
            TurnStarted(
                turn_id=turn.turn_id,
                worker_id=self.config.worker_id,
                model=self.engine.model_name,
                attempt=progress.attempt,
            ),
        )
        speech = self._speech_feed(turn, progress, assembled.language)
        guard = self._guard(turn, progress, channel, speech)
        generation = asyncio.create_task(
            self._generate(
                request,
                progress,
                channel,
                ticket,
                guard,
                speech=speech,
                cached_answer=assembled.cached_answer,
            )
        )
        self._running[turn.turn_id] = generation
        try:
            if await self.redis.exists(self.names.cancelled_key(turn.turn_id)):
                self.request_cancel(turn.turn_id)  # cancelled while we were getting ready
            finish, error = await self._await_generation(turn.turn_id, generation)
        finally:
            self._running.pop(turn.turn_id, None)
            self._guards.pop(turn.turn_id, None)
            self._safety_stops.pop(turn.turn_id, None)
            self._cancel_requested.discard(turn.turn_id)
            if not generation.done():
                generation.cancel()
        return await self._finish(
            progress,
            finish,
            error,
            replacement=_replacement(guard, finish),
            output_safety=guard.summary() if guard is not None else None,
            verdicts=guard.verdicts if guard is not None else None,
            screening=assembled.screening,
            speech=speech,
        )

    def _speech_feed(
        self, turn: TurnSubmitted, progress: TurnProgress, language: str = ""
    ) -> SpeechFeed | None:
        """The feed that speaks this answer as it is shown (None: text only), in a voice
        that speaks the user's `language` (ISO 639-1; "": the turn's voice as it is)."""
        if turn.speech is None or not self.config.speech_topic:
            return None

        async def send(piece: SpeechText) -> None:
            await self.producer.send(  # queued in order; delivery is not awaited
                self.config.speech_topic, encode(piece), key=turn.turn_id.encode()
            )

        feed = SpeechFeed(
            turn=turn,
            speech=turn.speech,
            attempt=progress.attempt,
            segments=self.config.segments,
            send=send,
            clock_ms=self.clock_ms,
            language=language,
        )
        return feed

    def _guard(
        self,
        turn: TurnSubmitted,
        progress: TurnProgress,
        channel: str,
        speech: SpeechFeed | None = None,
    ) -> OutputGuard | None:
        """The safety check of this answer's stream (None when the check is off for it)."""
        gate = self.config.gate_for(turn.tier)
        if gate is None:
            return None
        reply_to = self.names.safety_channel(self.config.worker_id)

        async def relay(text: str) -> None:
            await self._show(channel, progress, text, speech, self.clock_ms())

        async def send_window(window: Window) -> None:
            event = OutputWindow(
                turn_id=turn.turn_id,
                conversation_id=turn.conversation_id,
                tenant_id=turn.tenant_id,
                user_id=turn.user_id,
                index=window.index,
                text=window.text,
                final=window.final,
                reply_to=reply_to,
                sent_at_ms=self.clock_ms(),
            )
            try:  # a Redis list, not Kafka: a window is worthless after its deadline
                await push(
                    self.redis,
                    self.names.safety_windows_key(),
                    encode(event),
                    cap=self.config.windows_cap,
                )
            except RedisError as err:  # its verdict's deadline decides, as for a slow check
                log.warning("window %d of %s not queued: %r", window.index, turn.turn_id, err)

        def stop(how: SafetyStop) -> None:
            log.info("turn %s stopped by the safety check: %s", turn.turn_id, how.error.code)
            self._safety_stops[turn.turn_id] = how
            if speech is not None:  # the TTS worker drops what it has queued of this answer
                speech.halt()
                self._stop_speech_elsewhere(turn, how.error.code)
            task = self._running.get(turn.turn_id)
            if task is not None:  # also from inside it: it ends cancelled at its next step
                task.cancel()

        guard = OutputGuard(
            OutputGate(gate),
            relay=relay,
            send_window=send_window,
            stop=stop,
            clock_ms=self.clock_ms,
        )
        self._guards[turn.turn_id] = guard
        return guard

    def _stop_speech_elsewhere(self, turn: TurnSubmitted, reason: str) -> None:
        """Tell the TTS workers (control channel) to drop this answer's queued pieces."""
        event = TurnCancelled(
            turn_id=turn.turn_id, conversation_id=turn.conversation_id, reason=reason
        )
        task = asyncio.create_task(self.redis.publish(self.names.control_channel(), encode(event)))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _replay(
        self, turn: TurnSubmitted, recorded: bytes | None, decided: bytes | None
    ) -> bool:
        """A redelivered or retried turn is not generated again: its outcome (recorded, or
        decided by a try that a crash cut short) is relayed to the edge that asked. A
        recorded retryable error is not final: the retry generates again."""
        if final_outcome(recorded) is None and final_outcome(decided) is None:
            return False  # what OutcomeRecorder.replay would find: nothing final
        log.info("turn %s already answered; replaying its outcome", turn.turn_id)
        speech = self._speech_feed(turn, TurnProgress(turn))
        if speech is not None:  # its speech is not replayed: the edge must not wait for it
            await speech.finish(FinishReason.CANCELLED)
        return await self.outcomes.replay(recorded, decided, turn.edge_id) is not None

    async def _await_generation(
        self, turn_id: str, generation: asyncio.Task[None]
    ) -> tuple[FinishReason, ErrorInfo | None]:
        try:
            await asyncio.shield(generation)
        except asyncio.CancelledError:
            stop = self._safety_stops.get(turn_id)
            if stop is not None and generation.cancelled():
                return stop.finish_reason, stop.error
            if turn_id in self._cancel_requested and generation.cancelled():
                return FinishReason.CANCELLED, None
            raise  # the worker is stopping: leave the turn uncommitted, it is redelivered
        except EngineError as err:
            log.warning("engine failed turn %s: %s", turn_id, err)
            return FinishReason.ERROR, ErrorInfo(err.code, str(err), err.retryable)
        except Exception as err:
            log.exception("turn %s failed", turn_id)
            return FinishReason.ERROR, ErrorInfo("internal_error", f"generation failed: {err!r}")
        return FinishReason.STOP, None

    async def _generate(
        self,
        request: GenerationRequest,
        progress: TurnProgress,
        channel: str,
        ticket: Held | None = None,
        guard: OutputGuard | None = None,
        *,
        speech: SpeechFeed | None = None,
        cached_answer: str = "",
    ):
        if cached_answer:  # the semantic cache answered: no engine, the same stream
            if ticket is not None:
                ticket.started()
            nothing = await self.image_budget.acquire(0)  # no prefill to budget
            await self._stream(
                request,
                progress,
                channel,
                nothing,
                guard,
                speech=speech,
                cached_answer=cached_answer,
            )
            if guard is not None:
                await guard.finish()
                await guard.wait_settled()
            await self._show(channel, progress, "", speech, self.clock_ms(), last=True)
            return
        if request.images:
            if not self.engine.accepts_images:
                raise EngineError(
                    f"model {self.engine.model_name} reads text only; send the question "
                    "without images",
                    code="images_unsupported",
                )
            turn = progress.turn
            owner = f"{turn.tenant_id}/{turn.user_id}"
            pixels = await self.pixels.load(request.images, owner)
            request = dataclasses.replace(request, pixels=pixels)
        prompt_tokens = estimated_tokens(request.messages)
        need = kv_need(prompt_tokens, request.decoding.max_tokens, self._block_size)
        async with self.seats.seat(request.priority, need):  # a seat of the batch, by tier
            grant = await self.image_budget.acquire(len(request.images))
            if ticket is not None:
                ticket.started()  # leaves the worker's queue: the engine has it now
            chain = message_chain(request.messages, request.cache_salt)
            self.prefixes.remember(chain, prompt_tokens)
            self._prefilling[request.request_id] = prompt_tokens
            try:
                await self._stream(request, progress, channel, grant, guard, speech=speech)
            finally:
                grant.release()
                self._prefilling.pop(request.request_id, None)
        if guard is not None:  # the last window is judged before the answer ends
            await guard.finish()
            await guard.wait_settled()
        await self._show(channel, progress, "", speech, self.clock_ms(), last=True)

    async def _stream(
        self,
        request: GenerationRequest,
        progress: TurnProgress,
        channel: str,
        grant: Grant,
        guard: OutputGuard | None = None,
        *,
        speech: SpeechFeed | None = None,
        cached_answer: str = "",
    ) -> None:
        source = replay(cached_answer) if cached_answer else self.engine.stream(request)
        async for delta in _aiter(source):
            grant.release()  # the first output: its prefill (and image encoding) is done
            self._prefilling.pop(request.request_id, None)
            now = self.clock_ms()
            if progress.add(delta, now):
                if progress.chunks == 1:
                    spans.mark("first_token")  # on the turn's `chat` span
                if guard is not None:  # shown when (and as) the safety check allows
                    await guard.delta(delta.text, delta.new_tokens)
                    continue
                await self._show(channel, progress, delta.text, speech, now)

    async def _show(
        self,
        channel: str,
        progress: TurnProgress,
        text: str,
        speech: SpeechFeed | None,
        now: float,
        *,
        last: bool = False,
    ) -> None:
        """Relay a piece of the answer: its text, and the text of its tool calls marked
        with their index (never spoken). `last`: the answer ended; show what a call tag
        split across deltas held back."""
        if progress.calls is None:
            pieces = [(TEXT, text)] if text else []
        else:
            pieces = progress.calls.push(text) + (progress.calls.flush() if last else [])
        for index, piece in pieces:
            self.relay.publish(
                channel,
                TokenChunk(
                    turn_id=progress.turn.turn_id,
                    seq=progress.next_seq(),
                    text=piece,
                    emitted_at_ms=now,
                    attempt=progress.attempt,
                    call_index=index,
                ),
            )
            if speech is not None and index == TEXT:
                await speech.shown(piece)

    async def _finish(
        self,
        progress: TurnProgress,
        finish: FinishReason,
        error: ErrorInfo | None = None,
        *,
        replacement: str | None = None,
        output_safety: OutputSafety | None = None,
        verdicts: list[SafetyVerdict] | None = None,
        screening: Screening | None = None,
        speech: SpeechFeed | None = None,
    ) -> TurnCompleted:
        """`replacement`: the text that stands for the answer instead of what was generated
        (a safety cut: the client shows it in place of the retracted text, and the history
        keeps it)."""
        turn = progress.turn
        if finish == FinishReason.STOP and progress.finish_reason is not None:
            finish = progress.finish_reason  # the engine knows stop from length
        completed = progress.completed(
            finish_reason=finish,
            now_ms=self.clock_ms(),
            model=self.engine.model_name,
            worker_id=self.config.worker_id,
            error=error,
            engine_options=self.config.engine_options,
        )
        # Every spoken turn ends its speech, however it ends: the edge waits for that.
        speech = speech or self._speech_feed(turn, progress)
        if speech is not None:
            await speech.finish(completed.finish_reason)
        if replacement is not None:
            completed = msgspec.structs.replace(completed, text=replacement)
        elif progress.calls is not None:
            completed = with_tool_calls(completed, turn)
        if output_safety is not None or screening is not None:
            completed = msgspec.structs.replace(
                completed,
                output_safety=output_safety,
                screening=screening,
                verdicts=verdicts or [],
            )
        # Record first, tell the client last: once it sees `response.done`, the outcome is
        # durable in Kafka (the assembly job adds it to the history from there).
        await self.outcomes.record(completed, turn.edge_id)
        observe_completed(completed, self.config.pool)
        return completed

    async def _refuse_busy(self, assembled: TurnAssembled, held: int) -> None:
        """Answer at once (retryable error) instead of queueing behind `held` turns of the
        same conversation: a flood of one conversation must not hold every consumer slot."""
        message = f"{held} turns of this conversation are already queued; retry later"
        error = ErrorInfo("conversation_busy", message, retryable=True)
        await self._finish(TurnProgress(assembled.submitted, assembled), FinishReason.ERROR, error)

    async def fail_turn(self, event: AnyEvent, reason: str) -> None:
        """Last resort when handling a turn failed unexpectedly: the client still gets a
        `response.done` (finish_reason error) instead of waiting forever."""
        if not isinstance(event, TurnAssembled):
            return
        progress = TurnProgress(event.submitted, event)
        error = ErrorInfo("internal_error", f"the turn failed: {reason}"[:500], retryable=True)
        await self._finish(progress, FinishReason.ERROR, error)


def with_tool_calls(completed: TurnCompleted, turn: TurnSubmitted) -> TurnCompleted:
    """The answer's tool calls read out of its text; an answer that ended by itself with a
    call ends with `tool_calls` (a cut or cancelled one keeps its own reason, its calls
    too: the client decides whether to run a call it saw whole). Calls all of the
    deployment's tools carry the turn that will return their results (the tools worker
    runs them and submits it)."""
    choice = choice_in_force(turn.tools, turn.tool_choice)
    if choice is None:
        return completed
    text, calls = split_calls(completed.text, turn.turn_id, whole=whole_answer_is_a_call(choice))
    if not calls:
        return completed
    finish = completed.finish_reason
    if finish in (FinishReason.STOP, FinishReason.LENGTH) and completed.error is None:
        finish = FinishReason.TOOL_CALLS
    served = finish == FinishReason.TOOL_CALLS and all_server_calls(turn.tools, calls)
    return msgspec.structs.replace(
        completed,
        text=text,
        tool_calls=calls,
        finish_reason=finish,
        continuation=continuation(turn) if served else None,
    )


def _replacement(guard: OutputGuard | None, finish: FinishReason) -> str | None:
    """What the answer's text becomes under the safety check: the canned reply of a cut;
    for a cancel, only what was shown (hold-back may hold unjudged text)."""
    if guard is None:
        return None
    if guard.stopped is not None:
        return guard.stopped.replacement
    return guard.shown_text if finish == FinishReason.CANCELLED else None


async def _aiter(stream):
    """Iterate an engine stream and close it on exit, so a cancel aborts the request."""
    try:
        async for item in stream:
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def _messages(pubsub) -> AsyncIterator[bytes]:
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is not None and message["type"] == "message":
            yield message["data"]
