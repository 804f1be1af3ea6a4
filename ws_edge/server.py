"""The asyncio shell around `Session`: sockets, Kafka publishing, the Redis relay.

Each connection gets a `Session` (pure protocol), an `Outbox` and a writer task. Reading
never waits on Kafka: a turn's claim-and-publish runs in its own task, so a slow broker
delays only that turn's `turn.accepted`, never the connection or other users.
Disconnecting does not cancel a turn: generation finishes and is recorded; `turn.cancel`
stops it. A client that comes back (here or on another edge) resumes it: `_resume` checks the
turn is the user's, joins its watchers, and reads its log (`schemas.turn_log`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from urllib.parse import parse_qs, urlsplit

import msgspec
from redis.exceptions import RedisError
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from producers.turn_publisher import PublishFailed, TurnPublisher
from runtime import prometheus as prom
from runtime.blobs import blob_store
from runtime.exposure import require_safe_exposure
from runtime.instance_id import make_instance_id
from runtime.redis import redis_client
from runtime.settings import Settings
from runtime.tracing import spans
from runtime.tracing.propagation import from_http_headers, traceparent
from schemas.canary import apply_arm
from schemas.channels import RedisNames
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import (
    AnyEvent,
    FeedbackGiven,
    TokenChunk,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
)
from schemas.ids import now_ms
from schemas.topics import FEEDBACK, TURNS_COMPLETED, TURNS_SUBMITTED
from schemas.turn_log import LogPosition, decode_entries, plan_resume, range_start
from ws_edge.actions import (
    Action,
    Close,
    DetectSpeech,
    DropAudio,
    GiveFeedback,
    PublishTruncation,
    RequestCancel,
    ResumeTurn,
    Send,
    SubmitTurn,
)
from ws_edge.admission.admit import AdmissionControl
from ws_edge.admission.pool_load import PoolLoad
from ws_edge.admission.rate_limit import RateLimiter
from ws_edge.admission.tiers import TenantRegistry
from ws_edge.canary import CanaryWatch
from ws_edge.conversations import ConversationClaims
from ws_edge.errors import (
    BrokerUnavailable,
    EdgeError,
    ForbiddenConversation,
    StoreUnavailable,
    UnknownTurn,
)
from ws_edge.media import MediaLimits
from ws_edge.messages import (
    ErrorEvent,
    FeedbackRecorded,
    ResponseAudio,
    ResponseDelta,
    encode_server,
)
from ws_edge.outbox import Outbox, OutboxOverflow
from ws_edge.relay import RelaySubscriber
from ws_edge.session import Session, SessionLimits, error_event
from ws_edge.voice.loop import VadRules
from ws_edge.voice.speech_detector import SpeechDetector
from ws_edge.web_assets import process_request

log = logging.getLogger("turnstream.edge")

CANCEL_MARKER_TTL_S = 3600
CLOSE_TRY_AGAIN_LATER = 1013
_owner_record = msgspec.json.Decoder(tuple[str, str])  # (owner, conversation_id)


class EdgeServer:
    def __init__(self, settings: Settings, *, edge_id: str | None = None) -> None:
        self.settings = settings
        self.edge_id = edge_id or make_instance_id("edge", settings.edge_id)
        self.names = RedisNames.for_namespace(settings.namespace)
        self.redis = redis_client(settings.redis_url)
        self.publisher = TurnPublisher(
            settings.kafka_bootstrap,
            TURNS_SUBMITTED.full_name(settings.namespace),
            client_id=self.edge_id,
            timeout_s=settings.publish_timeout_s,
        )
        self.relay = RelaySubscriber(
            self.redis,
            self.names.edge_channel(self.edge_id),
            self.names.done_key,
            self.names.turn_log_key,
        )
        self.claims = ConversationClaims(self.redis, self.names, settings.history_ttl_s)
        self.limits = SessionLimits(
            max_message_bytes=settings.max_message_bytes,
            max_open_turns=settings.max_turns_in_flight_per_session,
            default_frequency_penalty=settings.default_frequency_penalty,
            media=MediaLimits(
                max_media_bytes=settings.max_media_bytes,
                max_images=settings.max_images_per_turn,
                max_audio_buffer_bytes=settings.max_audio_buffer_bytes,
                max_text_chars=settings.max_turn_chars,
            ),
            max_media_message_bytes=settings.max_frame_bytes,
            voices=settings.voice_names,
            vad=VadRules(
                threshold=settings.vad_threshold,
                silence_ms=settings.vad_silence_ms,
                min_speech_ms=settings.vad_min_speech_ms,
                barge_in_ms=settings.barge_in_min_speech_ms,
                early_silence_ms=settings.vad_early_silence_ms,
            ),
        )
        self.completed_topic = TURNS_COMPLETED.full_name(settings.namespace)
        self.feedback_topic = FEEDBACK.full_name(settings.namespace)
        self.blobs = blob_store(settings.blob_store_url, self.redis, self.names)
        self.admission = AdmissionControl(
            tenants=TenantRegistry.load(settings.tenant_registry_path),
            limiter=RateLimiter(
                self.redis, self.names.prefix, timeout_s=settings.rate_limit_timeout_s
            ),
            load=PoolLoad(
                self.redis,
                self.names,
                settings.pool_names,
                ttl_ms=settings.worker_state_ttl_ms,
                clock_ms=now_ms,
            ),
            fail_open=settings.rate_limit_fail_open,
            retry_after_ms=settings.overload_retry_after_ms,
        )
        self.canary = CanaryWatch(self.redis, self.names, now_ms)
        self._server: Server | None = None
        self.slow_clients_closed = 0  # connections closed for falling too far behind
        self._relay_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        require_safe_exposure(self.settings, edge=True)  # before anything listens
        await self.publisher.start()
        self._relay_task = asyncio.create_task(self.relay.run(), name="edge-relay")
        await asyncio.wait_for(self.relay.subscribed.wait(), timeout=10)
        self._server = await serve(
            self._handle,
            self.settings.edge_host,
            self.settings.edge_port,
            max_size=self.settings.max_frame_bytes,
            compression=None,  # small JSON frames: deflate costs more than it saves
            ping_interval=20,
            ping_timeout=20,
            process_request=process_request,  # the web client's page and scripts
        )
        log.info("edge %s listening on %s:%d", self.edge_id, self.settings.edge_host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._relay_task is not None:
            self._relay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._relay_task
        await self.publisher.stop()
        await self.redis.aclose()

    async def _handle(self, websocket: ServerConnection) -> None:
        await _Connection(self, websocket).run()


def _submit_error(exc: Exception) -> EdgeError:
    """What the client is told when a turn could not be submitted."""
    if isinstance(exc, EdgeError):
        return exc
    if isinstance(exc, PublishFailed):
        return BrokerUnavailable(
            f"{exc}; the turn may not have been accepted: retry with the same "
            "client_turn_id to get exactly one answer"
        )
    if isinstance(exc, RedisError):
        return StoreUnavailable(f"turn not accepted, retry: {exc}")
    log.exception("submitting a turn failed", exc_info=exc)
    return EdgeError(f"turn not accepted: internal error {type(exc).__name__}")


def _token_from_request(websocket: ServerConnection) -> str | None:
    request = websocket.request
    if request is None:
        return None
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    tokens = parse_qs(urlsplit(request.path).query).get("token")
    return tokens[0] if tokens else None


class _Connection:
    def __init__(self, edge: EdgeServer, websocket: ServerConnection) -> None:
        self.edge = edge
        self.websocket = websocket
        user_agent = websocket.request.headers.get("User-Agent", "") if websocket.request else ""
        self.session = Session(
            session_id=uuid.uuid4().hex,
            edge_id=edge.edge_id,
            auth_secret=edge.settings.auth_secret,
            limits=edge.limits,
            clock_ms=now_ms,
            client_info=user_agent[:200],
        )
        self.outbox = Outbox(edge.settings.outbox_max_frames, edge.settings.outbox_max_bytes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._detector: SpeechDetector | None = None  # the voice loop's VAD, made on first use
        self._speech_deadlines: dict[str, asyncio.TimerHandle] = {}
        self._submitted: set[str] = set()  # turns this connection created (it pays for them)
        # tracing: the caller's trace (a `traceparent` on the upgrade request), and the root
        # span of each turn this connection submitted, open until its answer is done here
        request = websocket.request
        self._caller_trace = from_http_headers(request.headers if request else None)
        self._turn_spans: dict[str, spans.Span] = {}
        self._first_token_seen: set[str] = set()

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        prom.EDGE_CONNECTIONS.inc()
        try:
            self._apply(self.session.open(_token_from_request(self.websocket)))
            async for frame in self.websocket:
                self._apply(self.session.receive(frame))
        except ConnectionClosed:
            pass
        finally:
            prom.EDGE_CONNECTIONS.dec()
            for turn_id in self.session.open_turns:
                self.edge.relay.unroute(turn_id, self._on_relay)
            for handle in self._speech_deadlines.values():
                handle.cancel()
            for turn_id in list(self._turn_spans):
                self._end_turn_span(turn_id, delivery="disconnected")
            self.outbox.closed = True
            writer.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(writer, *self._tasks, return_exceptions=True)

    # ---- actions ---------------------------------------------------------------------------
    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Send(event):
                    if isinstance(event, ErrorEvent):
                        prom.ERRORS.labels("edge", event.code).inc()
                    try:
                        if isinstance(event, ResponseDelta):
                            self.outbox.put_delta(event)
                        else:
                            tag = event.turn_id if isinstance(event, ResponseAudio) else None
                            self.outbox.put(encode_server(event), tag=tag)
                    except OutboxOverflow as err:
                        log.warning("closing slow client: %s", err)
                        self.edge.slow_clients_closed += 1
                        prom.EDGE_SLOW_CLOSED.inc()
                        self.outbox.closed = True  # later frames are dropped, close once
                        self._spawn(self.websocket.close(CLOSE_TRY_AGAIN_LATER, "slow consumer"))
                case SubmitTurn():
                    self._start_turn_span(action.turn)
                    self.edge.relay.route(action.turn.turn_id, self._on_relay)
                    self._submitted.add(action.turn.turn_id)
                    self._spawn(self._submit(action))
                case ResumeTurn():
                    self._spawn(self._resume(action))
                case RequestCancel():
                    self._spawn(self._cancel(action))
                case GiveFeedback():
                    self._spawn(self._feedback(action))
                case Close(code, reason):
                    self._spawn(self.websocket.close(code, reason))
                case DropAudio(turn_id):
                    self.outbox.drop(turn_id)
                case PublishTruncation(event):
                    self._spawn(self._publish_truncation(event))
                case DetectSpeech(stream_id, frames):
                    self._detect(stream_id, frames)

    # ---- tracing: one span per turn, from turn.create to response.done ---------------------
    def _start_turn_span(self, turn: TurnSubmitted) -> None:
        if turn.turn_id in self._turn_spans:  # a retry of a turn still open here
            return
        span = spans.start_turn(
            turn.turn_id,
            conversation_id=turn.conversation_id,
            tenant_id=turn.tenant_id,
            parent=self._caller_trace,
        )
        if spans.traced(span):  # tracing off and no caller trace: nothing to keep
            self._turn_spans[turn.turn_id] = span

    def _trace_delivery(self, event: AnyEvent) -> None:
        """Events on the turn's span as its answer reaches this connection (not a span per
        frame: the first token and the end are what latency questions need)."""
        span = self._turn_spans.get(event.turn_id)
        if span is None:
            return
        if isinstance(event, TurnStarted):
            spans.mark("turn.started", span)
        elif isinstance(event, TokenChunk) and event.turn_id not in self._first_token_seen:
            self._first_token_seen.add(event.turn_id)
            spans.mark("first_token", span)
        elif isinstance(event, TurnCompleted):
            self._end_turn_span(
                event.turn_id,
                delivery="done",
                finish_reason=str(event.finish_reason),
                error_code=event.error.code if event.error is not None else "",
                completion_tokens=event.usage.completion_tokens,
            )

    def _end_turn_span(self, turn_id: str, **outcome) -> None:
        span = self._turn_spans.pop(turn_id, None)
        self._first_token_seen.discard(turn_id)
        if span is not None:
            spans.end_turn(span, **outcome)

    def _on_relay(self, event: AnyEvent, position: LogPosition | None = None) -> None:
        turn_id = event.turn_id
        if self._turn_spans:
            self._trace_delivery(event)
        if isinstance(event, TurnCompleted) and turn_id in self._submitted:
            self._submitted.discard(turn_id)  # charged once, by the connection that asked
            self._spawn(self.edge.admission.charge(event))
        self._apply(self.session.relay(event, position))
        self._release(turn_id)
        self._watch_speech(turn_id)

    def _release(self, turn_id: str) -> None:
        if turn_id not in self.session.open_turns:  # its last frame (text and speech) went
            self.edge.relay.unroute(turn_id, self._on_relay)

    def _watch_speech(self, turn_id: str) -> None:
        """Once an answer's text is done, its speech must keep coming: each frame re-arms a
        deadline, past which the client is told speech is unavailable."""
        handle = self._speech_deadlines.pop(turn_id, None)
        if handle is not None:
            handle.cancel()
        if self.session.awaits_audio(turn_id):
            self._speech_deadlines[turn_id] = asyncio.get_running_loop().call_later(
                self.edge.settings.speech_deadline_s, self._speech_timed_out, turn_id
            )

    def _speech_timed_out(self, turn_id: str) -> None:
        self._speech_deadlines.pop(turn_id, None)
        self._apply(self.session.speech_timed_out(turn_id))
        if turn_id not in self.session.open_turns:
            self.edge.relay.unroute(turn_id, self._on_relay)

    def _detect(self, stream_id: str, frames: bytes) -> None:
        """Score the voice loop's frames (Silero: ~0.1 ms a frame, so inline) and feed the
        scores back to the session."""
        try:
            if self._detector is None:
                self._detector = SpeechDetector()
            probs = self._detector.score(frames)
        except Exception as exc:  # no VAD model installed, or it failed: say so in-band
            log.warning("voice activity detection failed: %s", exc)
            err = EdgeError(f"voice activity detection unavailable: {exc}", code="vad_unavailable")
            self._apply([error_event(err)])
            return
        self._apply(self.session.voice_activity(stream_id, frames, probs))

    async def _publish_truncation(self, event) -> None:
        try:
            await self.edge.publisher.publish(event, self.edge.completed_topic)
        except Exception as exc:
            log.warning("truncation of turn %s not recorded: %s", event.turn_id, exc)
            self._apply([error_event(_submit_error(exc), event.turn_id)])

    async def _submit(self, action: SubmitTurn) -> None:
        span = self._turn_spans.get(action.turn.turn_id)
        if span is None:
            await self._submit_turn(action)
            return
        with spans.current(span):  # admission, claims, uploads and the publish, in the turn
            await self._submit_turn(action)

    async def _submit_turn(self, action: SubmitTurn) -> None:
        turn = action.turn
        try:
            turn = await self.edge.admission.admit(turn)
            turn = apply_arm(turn, await self.edge.canary.current())
            context = traceparent()  # the turn's root span (when traced)
            if context:
                turn = msgspec.structs.replace(turn, traceparent=context)
            if not await self.edge.claims.claim(turn.tenant_id, turn.conversation_id, action.owner):
                raise ForbiddenConversation(
                    f"conversation {turn.conversation_id!r} belongs to another user"
                )
            ttl_s = self.edge.settings.media_ttl_s
            for upload in action.uploads:  # stored before the turn exists for any worker
                await self.edge.blobs.put(upload.key, upload.data, ttl_s=ttl_s)
            await self._remember_owner(turn, action.owner)
            await self.edge.publisher.publish(turn)
        except Exception as exc:
            self.edge.relay.unroute(turn.turn_id, self._on_relay)
            error = _submit_error(exc)
            self._end_turn_span(turn.turn_id, delivery="refused", error_code=error.code)
            self._apply(self.session.submit_failed(turn.turn_id, error))
            return
        spans.mark("turn.accepted")
        self._apply(self.session.submit_succeeded(turn.turn_id))

    async def _remember_owner(self, turn: TurnSubmitted, owner: str) -> None:
        """Who may resume the turn, and which turn a second device joins."""
        names, ttl_s = self.edge.names, self.edge.settings.history_ttl_s
        record = msgspec.json.encode((owner, turn.conversation_id))
        async with self.edge.redis.pipeline(transaction=False) as pipe:
            pipe.set(names.turn_owner_key(turn.turn_id), record, ex=ttl_s)
            latest = names.latest_turn_key(turn.tenant_id, turn.conversation_id)
            pipe.set(latest, turn.turn_id, ex=ttl_s)
            await pipe.execute()

    async def _resume(self, action: ResumeTurn) -> None:
        """Follow a turn again after a reconnect (or from another device): check it is the
        user's, route its frames here, join its watchers, then read its log. Routing and
        joining come before the read, so every frame is in the log read or arrives live."""
        edge, names = self.edge, self.edge.names
        turn_id = action.turn_id
        try:
            if turn_id is None:
                assert action.conversation_id is not None
                latest = await edge.redis.get(
                    names.latest_turn_key(action.tenant_id, action.conversation_id)
                )
                if latest is None:
                    raise UnknownTurn(
                        f"no turn of conversation {action.conversation_id!r} of yours to join"
                    )
                turn_id = latest.decode()
            record = await edge.redis.get(names.turn_owner_key(turn_id))
            try:
                owner, conversation_id = _owner_record.decode(record or b"")
            except msgspec.DecodeError:
                owner, conversation_id = "", ""
            if owner != action.owner:  # the same answer whether it exists or not
                raise UnknownTurn(f"no turn {turn_id!r} of yours to resume")
        except (EdgeError, RedisError) as exc:
            prom.EDGE_RESUMES.labels("refused").inc()
            self._apply(self.session.resume_failed(action.turn_id, _submit_error(exc)))
            return
        self._apply(self.session.resume_found(turn_id, conversation_id, action.after))
        if turn_id not in self.session.open_turns:
            return  # refused (already streaming here, too many turns): the error went out
        edge.relay.route(turn_id, self._on_relay)
        try:
            async with edge.redis.pipeline(transaction=False) as pipe:
                pipe.sadd(names.turn_watchers_key(turn_id), edge.relay.channel)
                pipe.expire(names.turn_watchers_key(turn_id), edge.settings.resume_history_s)
                pipe.xrange(names.turn_log_key(turn_id), range_start(action.after), "+")
                pipe.exists(names.turn_log_key(turn_id))
                pipe.get(names.done_key(turn_id))
                _, _, raw_entries, log_exists, done = await pipe.execute()
        except RedisError as exc:
            edge.relay.unroute(turn_id, self._on_relay)
            err = StoreUnavailable(f"resume failed, retry: {exc}")
            self._apply(self.session.resume_failed(turn_id, err))
            return
        entries = decode_entries(raw_entries)
        first = entries[0][1] if entries else None
        plan = plan_resume(action.after, first, log_exists=bool(log_exists))
        outcome = None
        if not log_exists and done is not None:  # the answer ended and its log is gone
            with contextlib.suppress(DecodeError):
                recorded = decode(done)
                if isinstance(recorded, TurnCompleted):
                    outcome = recorded
        prom.EDGE_RESUMES.labels(plan.status).inc()
        self._apply(self.session.resume_loaded(turn_id, plan, entries, outcome))
        self._release(turn_id)

    async def _feedback(self, action: GiveFeedback) -> None:
        """Only the user who asked may rate a turn: its recorded outcome names them."""
        try:
            raw = await self.edge.redis.get(self.edge.names.done_key(action.turn_id))
            outcome = decode(raw) if raw is not None else None
            if not (
                isinstance(outcome, TurnCompleted)
                and (outcome.tenant_id, outcome.user_id) == (action.tenant_id, action.user_id)
            ):
                raise UnknownTurn(
                    f"no finished turn {action.turn_id!r} of yours to give feedback on"
                )
            feedback = FeedbackGiven(
                turn_id=action.turn_id,
                conversation_id=outcome.conversation_id,
                tenant_id=action.tenant_id,
                user_id=action.user_id,
                kind=action.kind,
                comment=action.comment,
                given_at_ms=now_ms(),
            )
            await self.edge.publisher.publish(feedback, self.edge.feedback_topic)
        except Exception as exc:
            self._apply([error_event(_submit_error(exc), action.turn_id)])
            return
        self._apply([Send(FeedbackRecorded(action.turn_id, action.kind))])

    async def _cancel(self, action: RequestCancel) -> None:
        names = self.edge.names
        event = TurnCancelled(
            turn_id=action.turn_id, conversation_id=action.conversation_id, reason=action.reason
        )
        try:
            async with self.edge.redis.pipeline(transaction=False) as pipe:
                pipe.set(names.cancelled_key(action.turn_id), "1", ex=CANCEL_MARKER_TTL_S)
                pipe.publish(names.control_channel(), encode(event))
                await pipe.execute()
        except RedisError as exc:
            err = StoreUnavailable(f"cancel not delivered, retry: {exc}")
            self._apply([error_event(err, action.turn_id)])

    async def _write(self) -> None:
        while True:
            frames = await self.outbox.take_all()
            prom.EDGE_FRAMES.inc(len(frames))
            try:
                for frame in frames:
                    await self.websocket.send(frame)
            except ConnectionClosed:
                return

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
