"""A client's way into the pipeline, whatever carries it: the session's actions carried out.

`TurnDoor` holds what a WebSocket connection (`ws_edge.server`) and an HTTP request
(`ws_edge.http`) share: admission, the conversation claim, media uploads, the Kafka publish,
the relay route, resume from the turn's log, cancel, feedback, speech deadlines and the
turn's span. One pipeline, two doors: the HTTP door drives the same `Session` with the
same `turn.create` and `response.resume` messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
from redis.exceptions import RedisError

from producers.turn_publisher import PublishFailed
from runtime import prometheus as prom
from runtime.cancelling import cancel_and_wait
from runtime.tracing import spans
from runtime.tracing.propagation import from_http_headers, traceparent
from schemas.canary import apply_arm
from schemas.codec import decode, encode
from schemas.errors import DecodeError
from schemas.events import (
    AnyEvent,
    FeedbackGiven,
    SpeechDelivered,
    TokenChunk,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
)
from schemas.ids import now_ms
from schemas.turn_log import START, LogPosition, decode_entries, plan_resume, range_start
from ws_edge.abandonment import Departure
from ws_edge.actions import (
    Action,
    CheckCommand,
    CheckTurn,
    Close,
    ConfirmTurn,
    DetectSpeech,
    DropAudio,
    FollowTurn,
    GiveFeedback,
    PublishTruncation,
    RecordSpeech,
    RequestCancel,
    ResolveApiKey,
    ResumeTurn,
    Send,
    SubmitTurn,
    TranscribeSoFar,
)
from ws_edge.admission.admit import estimated_prompt_tokens
from ws_edge.auth import is_api_key
from ws_edge.errors import (
    BrokerUnavailable,
    CommandSpotterUnavailable,
    EdgeError,
    ForbiddenConversation,
    InterimTranscriberUnavailable,
    StoreUnavailable,
    TurnModelUnavailable,
    UnknownTurn,
)
from ws_edge.messages import ErrorEvent, FeedbackRecorded, ServerEvent
from ws_edge.outbox import Outbox
from ws_edge.session import Session, error_event
from ws_edge.voice.speech_detector import SpeechDetector

if TYPE_CHECKING:
    from ws_edge.server import EdgeServer

log = logging.getLogger("turnstream.edge")

CANCEL_MARKER_TTL_S = 3600
_owner_record = msgspec.json.Decoder(tuple[str, str])  # (owner, conversation_id)


def submit_error(exc: Exception) -> EdgeError:
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


class TurnDoor:
    """A client's way in (a WebSocket connection, an HTTP request): its `Session` and the
    turns it submitted, resumed or watches. Subclasses deliver the session's events
    (`_deliver`) and close the way in (`_close`)."""

    def __init__(self, edge: EdgeServer, headers: Mapping[str, str] | None) -> None:
        self.edge = edge
        user_agent = headers.get("User-Agent", "") if headers is not None else ""
        self.session = Session(
            session_id=uuid.uuid4().hex,
            edge_id=edge.edge_id,
            auth_secret=edge.settings.auth_secret,
            limits=edge.limits,
            clock_ms=now_ms,
            client_info=user_agent[:200],
            server_tools=edge.server_tools,
        )
        # the client's bounded queue of outgoing frames (a slow reader is cut off at its bound)
        self.outbox = Outbox(edge.settings.outbox_max_frames, edge.settings.outbox_max_bytes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._detector: SpeechDetector | None = None  # the voice loop's VAD, made on first use
        self._turn_model_failed = False  # said once in-band; later pauses fall back quietly
        self._interim_failed = False  # likewise for interim transcripts
        self._interim_warmed = False
        self._speech_deadlines: dict[str, asyncio.TimerHandle] = {}
        # turns this door created (it charges them), with the tokens admission estimated
        self._submitted: dict[str, int] = {}
        # tracing: the caller's trace (a `traceparent` on the request), and the root span
        # of each turn this door submitted, open until its answer is done here
        self._caller_trace = from_http_headers(headers)
        self._turn_spans: dict[str, spans.Span] = {}
        self._first_token_seen: set[str] = set()

    async def authenticate(self, token: str | None) -> None:
        """The request's credential, checked before it goes on: a signed token (in the
        session) or an API key (looked up in Redis, `ws_edge.api_keys`); a refusal goes out
        as an error event."""
        if is_api_key(token):
            assert token is not None
            await self._resolve_key(ResolveApiKey(token))
        else:
            self._apply(self.session.open(token))

    async def _resolve_key(self, action: ResolveApiKey) -> None:
        try:
            principal = await self.edge.api_keys.resolve(action.key)
        except EdgeError as err:
            self._apply(self.session.key_refused(err))
            return
        self._apply(self.session.admit(principal))

    # ---- what a way in does ----------------------------------------------------------------
    def _deliver(self, event: ServerEvent) -> None:
        """Queue one of the session's events for the client."""
        raise NotImplementedError

    async def _close(self, code: int, reason: str) -> None:
        """End the client's way in (a WebSocket close code and its reason)."""
        raise NotImplementedError

    async def _teardown(self) -> None:
        """The client went: stop routing its turns here (they go on: disconnecting never
        cancels an answer), end their spans, cancel this door's tasks."""
        principal = self.session.principal
        if principal is not None:  # the answers it left unfinished may prove abandoned
            left_at, window_s = now_ms(), self.edge.abandonment.window_s
            await self.edge.abandonment.left(
                [
                    Departure(
                        turn_id=turn_id,
                        conversation_id=conversation,
                        tenant_id=principal.tenant_id,
                        user_id=principal.user_id,
                        left_at_ms=left_at,
                        window_s=window_s,
                    )
                    for turn_id, conversation in self.session.unfinished()
                ]
            )
        for turn_id in self.session.open_turns:
            self.edge.relay.unroute(turn_id, self._on_relay)
        for turn_id, estimated in self._submitted.items():  # they go on, and are paid for
            self.edge.unattended.adopt(turn_id, estimated)
        self._submitted.clear()
        for handle in self._speech_deadlines.values():
            handle.cancel()
        for turn_id in list(self._turn_spans):
            self._end_turn_span(turn_id, delivery="disconnected")
        await cancel_and_wait(list(self._tasks))

    # ---- actions ---------------------------------------------------------------------------
    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Send(event):
                    if isinstance(event, ErrorEvent):
                        prom.ERRORS.labels("edge", event.code).inc()
                    self._deliver(event)
                case SubmitTurn():
                    self._start_turn_span(action.turn)
                    self.edge.relay.route(action.turn.turn_id, self._on_relay)
                    self._submitted[action.turn.turn_id] = estimated_prompt_tokens(action.turn)
                    self._spawn(self._submit(action))
                case ResumeTurn():
                    self._spawn(self._resume(action))
                case ConfirmTurn(turn_id):
                    self._spawn(self._confirm(turn_id))
                case FollowTurn():
                    self._start_turn_span(action.turn)
                    self.edge.relay.route(action.turn.turn_id, self._on_relay)
                    self._spawn(self._follow(action))
                case ResolveApiKey():
                    self._spawn(self._resolve_key(action))
                case RequestCancel():
                    self._spawn(self._cancel(action))
                case GiveFeedback():
                    self._spawn(self._feedback(action))
                case Close(code, reason):
                    self._spawn(self._close(code, reason))
                case DropAudio(turn_id):
                    self.outbox.drop(turn_id)
                case PublishTruncation(event):
                    self._spawn(self._publish_truncation(event))
                case RecordSpeech(event):
                    self._spawn(self._record_speech(event))
                case DetectSpeech(stream_id, frames):
                    self._detect(stream_id, frames)
                case CheckTurn(stream_id, pause_id, pcm):
                    self._spawn(self._check_turn(stream_id, pause_id, pcm))
                case CheckCommand():
                    self._spawn(self._check_command(action))
                case TranscribeSoFar():
                    self._spawn(self._transcribe_so_far(action))

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
        """Events on the turn's span as its answer reaches this door (not a span per
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
            estimated = self._submitted.pop(turn_id)  # charged once, by the door that asked
            self.edge.admission.charge(event, estimated)
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
                self.edge.command_judge.warm()  # a voice loop: short commands come next
            if self.session.wants_interim and not self._interim_warmed:
                self._interim_warmed = True
                self.edge.interim_transcriber.warm()  # the first interim comes in a second
            probs = self._detector.score(frames)
        except Exception as exc:  # no VAD model installed, or it failed: say so in-band
            log.warning("voice activity detection failed: %s", exc)
            err = EdgeError(f"voice activity detection unavailable: {exc}", code="vad_unavailable")
            self._apply([error_event(err)])
            return
        self._apply(self.session.voice_activity(stream_id, frames, probs))

    async def _check_turn(self, stream_id: str, pause_id: int, pcm: bytes) -> None:
        """The turn model's verdict on a pause (in its threads), back to the session. A model
        that cannot run is said in-band once; every pause then falls back to silence."""
        probability: float | None = None
        try:
            probability = await self.edge.turn_judge.probability(pcm)
        except TurnModelUnavailable as exc:
            if not self._turn_model_failed:
                self._turn_model_failed = True
                log.warning("%s", exc)
                self._apply([error_event(exc)])
        self._apply(self.session.turn_verdict(stream_id, pause_id, probability))

    async def _check_command(self, check: CheckCommand) -> None:
        """The spotter's verdict on short speech over the voice (in its thread), back to the
        session. A spotter that cannot run is logged once per process; every check then
        falls back to the duration rule (the client did not ask for it: nothing in-band)."""
        command: bool | None = None
        try:
            command = await self.edge.command_judge.verdict(check.pcm, check.language)
        except CommandSpotterUnavailable as exc:
            if not self.edge.command_spotter_failed:
                self.edge.command_spotter_failed = True
                log.warning("%s; short commands fall back to the duration rule", exc)
        self._apply(self.session.command_verdict(check.stream_id, check.check_id, command))

    async def _transcribe_so_far(self, so_far: TranscribeSoFar) -> None:
        """The words of the utterance so far (in the interim transcriber's thread), back to
        the session. A transcriber that cannot run is said in-band once (the client asked for
        interim transcripts); the turn's own transcript still comes."""
        heard = None
        try:
            heard = await self.edge.interim_transcriber.read(so_far.pcm, so_far.language)
        except InterimTranscriberUnavailable as exc:
            if not self._interim_failed:
                self._interim_failed = True
                log.warning("%s", exc)
                self._apply([error_event(exc)])
        self._apply(self.session.interim_heard(so_far.stream_id, so_far, heard))

    async def _publish_truncation(self, event) -> None:
        try:
            await self.edge.publisher.publish(event, self.edge.completed_topic)
        except Exception as exc:
            log.warning("truncation of turn %s not recorded: %s", event.turn_id, exc)
            self._apply([error_event(submit_error(exc), event.turn_id)])

    async def _record_speech(self, event: SpeechDelivered) -> None:
        """Best effort: the client has its audio; only the trace's speech hops miss it."""
        try:
            await self.edge.publisher.publish(event, self.edge.completed_topic)
        except Exception as exc:
            log.warning("speech of turn %s not recorded: %s", event.turn_id, exc)

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
            retried = await self._remember_owner(turn, action.owner)
            await self.edge.publisher.publish(turn)
        except Exception as exc:
            self.edge.relay.unroute(turn.turn_id, self._on_relay)
            # nothing to charge at its end (what admission took, if it got that far, stays
            # taken: a retry is admitted again)
            self._submitted.pop(turn.turn_id, None)
            error = submit_error(exc)
            self._end_turn_span(turn.turn_id, delivery="refused", error_code=error.code)
            self._apply(self.session.submit_failed(turn.turn_id, error))
            return
        spans.mark("turn.accepted")
        earlier: list[tuple[AnyEvent, LogPosition]] = []
        outcome = None
        if retried:  # its first try may be answering already: catch up from its log
            try:
                earlier, _, outcome = await self._read_log(turn.turn_id, START)
            except RedisError as exc:  # accepted all the same: the live frames still come
                log.warning("turn %s: its log could not be read (%s)", turn.turn_id, exc)
        self._apply(self.session.submit_succeeded(turn.turn_id, earlier, outcome))

    async def _remember_owner(self, turn: TurnSubmitted, owner: str) -> bool:
        """Who may resume the turn, and which turn a second device joins; True when the
        turn was submitted before (a retry with the same client_turn_id, perhaps after a
        refusal whose turn did reach Kafka)."""
        names, ttl_s = self.edge.names, self.edge.settings.history_ttl_s
        record = msgspec.json.encode((owner, turn.conversation_id))
        async with self.edge.redis.pipeline(transaction=False) as pipe:
            pipe.set(names.turn_owner_key(turn.turn_id), record, ex=ttl_s, get=True)
            latest = names.latest_turn_key(turn.tenant_id, turn.conversation_id)
            pipe.set(latest, turn.turn_id, ex=ttl_s)
            before, _ = await pipe.execute()
        return before is not None

    async def _read_log(
        self, turn_id: str, after: LogPosition
    ) -> tuple[list[tuple[AnyEvent, LogPosition]], bool, TurnCompleted | None]:
        """Watch the turn from this edge (its frames reach us live even when another edge
        submitted it), then read its log after `after`: (entries, whether the log exists,
        the recorded outcome when the log is gone). Watching comes before the read, so
        every frame is in the read or arrives live."""
        edge, names = self.edge, self.edge.names
        async with edge.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(names.turn_watchers_key(turn_id), edge.relay.channel)
            pipe.expire(names.turn_watchers_key(turn_id), edge.settings.resume_history_s)
            pipe.xrange(names.turn_log_key(turn_id), range_start(after), "+")
            pipe.exists(names.turn_log_key(turn_id))
            pipe.get(names.done_key(turn_id))
            _, _, raw_entries, log_exists, done = await pipe.execute()
        outcome = None
        if not log_exists and done is not None:  # the answer ended and its log is gone
            with contextlib.suppress(DecodeError):
                recorded = decode(done)
                if isinstance(recorded, TurnCompleted):
                    outcome = recorded
        return decode_entries(raw_entries), bool(log_exists), outcome

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
            owner, conversation_id = await self.owner_of(turn_id)
            if owner != action.owner:  # the same answer whether it exists or not
                raise UnknownTurn(f"no turn {turn_id!r} of yours to resume")
        except (EdgeError, RedisError) as exc:
            prom.EDGE_RESUMES.labels("refused").inc()
            self._apply(self.session.resume_failed(action.turn_id, submit_error(exc)))
            return
        self._apply(self.session.resume_found(turn_id, conversation_id, action.after))
        if turn_id not in self.session.open_turns:
            return  # refused (already streaming here, too many turns): the error went out
        await edge.abandonment.returned(turn_id)
        edge.relay.route(turn_id, self._on_relay)
        try:
            entries, log_exists, outcome = await self._read_log(turn_id, action.after)
        except RedisError as exc:
            edge.relay.unroute(turn_id, self._on_relay)
            err = StoreUnavailable(f"resume failed, retry: {exc}")
            self._apply(self.session.resume_failed(turn_id, err))
            return
        first = entries[0][1] if entries else None
        plan = plan_resume(action.after, first, log_exists=log_exists)
        prom.EDGE_RESUMES.labels(plan.status).inc()
        self._apply(self.session.resume_loaded(turn_id, plan, entries, outcome))
        self._release(turn_id)

    async def _confirm(self, turn_id: str) -> None:
        """Its side-effecting tool calls wait for this (workers/tools); lost, they run
        none, as for a guess that was withdrawn: safe, and said in the call's result."""
        try:
            await self.edge.redis.set(
                self.edge.names.confirmed_key(turn_id), "1", ex=CANCEL_MARKER_TTL_S
            )
        except RedisError as exc:
            log.warning("turn %s: its confirmation was not recorded (%s)", turn_id, exc)

    async def _follow(self, action: FollowTurn) -> None:
        """Stream the turn an answer continues in (routed already, so every frame is in
        the log read or arrives live), and let its owner resume it later."""
        turn = action.turn
        entries: list[tuple[AnyEvent, LogPosition]] = []
        outcome = None
        try:
            await self._remember_owner(turn, action.owner)
            entries, _, outcome = await self._read_log(turn.turn_id, START)
        except RedisError as exc:  # the live frames still come; a resume can fill a gap
            log.warning("turn %s: its log could not be read (%s)", turn.turn_id, exc)
        self._apply(self.session.follow_loaded(turn.turn_id, entries, outcome))
        self._release(turn.turn_id)

    async def owner_of(self, turn_id: str) -> tuple[str, str]:
        """Who asked for the turn, and in which conversation (("", "") when unknown)."""
        record = await self.edge.redis.get(self.edge.names.turn_owner_key(turn_id))
        try:
            return _owner_record.decode(record or b"")
        except msgspec.DecodeError:
            return "", ""

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
            self._apply([error_event(submit_error(exc), action.turn_id)])
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

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
