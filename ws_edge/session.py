"""One client session as a pure state machine: frames and relay events in, actions out.

No sockets, no Redis, no Kafka here (the shape of python-websockets' `protocol.py`): the
asyncio shell in `ws_edge.server` feeds it and carries out the actions it returns. That keeps
every protocol rule testable without a loop.

Turn lifecycle at the edge: `turn.create` → SubmitTurn (the shell claims the conversation and
publishes to Kafka) → `submit_succeeded` sends `turn.accepted` → relayed frames stream as
`response.*` → `response.done` closes the route. Frames that race ahead of the Kafka ack are
held until `turn.accepted` is sent, so the client always sees them in order.

Resume: `response.resume` → ResumeTurn (the shell checks the turn is the user's) →
`resume_found` opens a route that holds live frames → the shell reads the turn's log →
`resume_loaded` sends `response.resumed`, the logged frames after the client's position,
then the held ones. Every logged frame has a position; a route drops any at or before the
last one it sent, so the log and the live stream overlap without duplicates.
"""

from __future__ import annotations

import base64
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from schemas.events import (
    OUTPUT_CUT,
    AnyEvent,
    DecodingParams,
    ErrorInfo,
    FeedbackKind,
    ImageGenerated,
    ImageProgress,
    InputTranscribed,
    SpeechAudio,
    SpeechSettings,
    TokenChunk,
    Truncation,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
    TurnTruncated,
)
from schemas.events import ImageOptions as ImageRequest
from schemas.turn_log import START, LogPosition, ResumePlan
from ws_edge.auth import Principal, verify_token
from ws_edge.errors import (
    AuthError,
    EdgeError,
    InvalidMessage,
    MalformedMessage,
    MessageTooLarge,
    TooManyTurns,
    UnknownMessageType,
    UnknownTurn,
)
from ws_edge.media import AudioBuffers, MediaLimits, Upload, decode_base64, turn_content
from ws_edge.messages import (
    CLIENT_TYPES,
    MEDIA_TYPES,
    AnyClientMessage,
    AppendAudio,
    AudioPart,
    Authenticate,
    CancelTurn,
    ClearAudio,
    CreateTurn,
    ErrorEvent,
    Feedback,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscript,
    InterruptTurn,
    Ping,
    Pong,
    ResponseAudio,
    ResponseAudioDone,
    ResponseDelta,
    ResponseDone,
    ResponseImage,
    ResponseImageProgress,
    ResponseRestarted,
    ResponseResumed,
    ResponseRetracted,
    ResponseStarted,
    ResponseTruncated,
    ResumeResponse,
    ServerEvent,
    SessionReady,
    SessionUpdate,
    SessionUpdated,
    SpeechOptions,
    TurnAccepted,
    TurnDetection,
    client_decoder,
)
from ws_edge.voice.audio_timeline import AudioTimeline
from ws_edge.voice.loop import (
    BargeIn,
    SpeechEnded,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    VadRules,
    VoiceEvent,
    VoiceLoop,
)

MAX_AUTH_FAILURES = 3
MAX_PLAYED = 4  # spoken answers kept interruptible after their last frame
CLOSE_POLICY_VIOLATION = 4401
_TURN_ID_NAMESPACE = uuid.UUID("6f1b9a52-3c8e-4d1a-9a57-2b8e0c1d7f10")


# ---- actions the shell carries out ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Send:
    event: ServerEvent


@dataclass(frozen=True, slots=True)
class SubmitTurn:
    """Store the turn's media, claim the conversation for the principal, publish the turn,
    report back."""

    turn: TurnSubmitted
    owner: str
    uploads: tuple[Upload, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestCancel:
    """Stop the turn everywhere: generation, speech (control channel + marker)."""

    turn_id: str
    conversation_id: str
    reason: str = "user"


@dataclass(frozen=True, slots=True)
class PublishTruncation:
    """Record a barge-in's truncation (Kafka), so the history keeps only what was heard."""

    event: TurnTruncated


@dataclass(frozen=True, slots=True)
class DropAudio:
    """Drop the turn's audio frames still queued for the client."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class DetectSpeech:
    """Score these whole 32 ms frames of the voice loop's stream with the VAD model, then
    hand the scores to `Session.voice_activity`."""

    stream_id: str
    frames: bytes


@dataclass(frozen=True, slots=True)
class GiveFeedback:
    """Check that the turn is the principal's (from its recorded outcome), then publish the
    feedback and confirm it; otherwise answer `unknown_turn`."""

    turn_id: str
    kind: FeedbackKind
    comment: str
    tenant_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class ResumeTurn:
    """Find the turn a `response.resume` names (by id, or its conversation's latest), check
    that it is `owner`'s, then `resume_found` and read its log after `after`."""

    turn_id: str | None
    conversation_id: str | None
    after: LogPosition
    owner: str
    tenant_id: str


@dataclass(frozen=True, slots=True)
class Close:
    code: int
    reason: str


Action = (
    Send
    | SubmitTurn
    | RequestCancel
    | GiveFeedback
    | Close
    | PublishTruncation
    | DropAudio
    | DetectSpeech
    | ResumeTurn
)


@dataclass(frozen=True, slots=True)
class SessionLimits:
    max_message_bytes: int = 32 * 1024
    max_open_turns: int = 8
    default_max_tokens: int = 256
    default_repetition_penalty: float = 1.2  # TURNSTREAM_DEFAULT_REPETITION_PENALTY
    media: MediaLimits = field(default_factory=MediaLimits)
    max_media_message_bytes: int = 16 * 1024 * 1024  # turn.create / audio.append frames
    voices: tuple[str, ...] = ("joe", "espeak")  # what the TTS workers offer
    vad: VadRules = field(default_factory=VadRules)


@dataclass(slots=True)
class _Route:
    conversation_id: str
    client_turn_id: str | None = None
    accepted: bool = False
    held: list[tuple[AnyEvent, LogPosition | None]] = field(default_factory=list)
    position: LogPosition | None = None  # of the last logged frame handled (resume, dedup)
    resuming: LogPosition | None = None  # a resume's position, until its log is read
    attempt: str | None = None  # the answer being streamed now
    last_seq: int = -1
    shown_chars: int = 0  # characters of the current attempt's deltas sent to the client
    speech: bool = False  # the answer is spoken too: the route lasts until its audio ends
    text_done: bool = False  # response.done sent
    audio_done: bool = False  # response.audio.done sent
    interrupted: bool = False
    timeline: AudioTimeline = field(default_factory=AudioTimeline)
    first_audio_ms: float | None = None  # when its first audio left (playback estimate)
    # the voice loop started it on a guess that the user stopped talking: nothing of it
    # reaches the client until the guess is confirmed; `withdrawn` when it proved wrong
    speculative: bool = False
    withdrawn: bool = False
    carried: list[Truncation] = field(default_factory=list)  # its turn's `truncates`


class _Envelope(msgspec.Struct):
    type: str


_envelope_decoder = msgspec.json.Decoder(_Envelope)


def error_event(
    err: EdgeError, turn_id: str | None = None, client_turn_id: str | None = None
) -> Send:
    return Send(
        ErrorEvent(
            code=err.code,
            message=err.message,
            retryable=err.retryable,
            retry_after_ms=getattr(err, "retry_after_ms", None),
            turn_id=turn_id,
            client_turn_id=client_turn_id or err.client_turn_id,
        )
    )


def turn_id_for(principal: Principal, conversation_id: str, client_turn_id: str | None) -> str:
    """A retry with the same client_turn_id in the same conversation maps to the same turn
    (answered once); the same id in another conversation is another turn."""
    if client_turn_id is None:
        return uuid.uuid4().hex
    name = msgspec.json.encode([principal.owner, conversation_id, client_turn_id]).decode()
    return uuid.uuid5(_TURN_ID_NAMESPACE, name).hex


class Session:
    def __init__(
        self,
        *,
        session_id: str,
        edge_id: str,
        auth_secret: str,
        limits: SessionLimits,
        clock_ms: Callable[[], float],
        client_info: str = "",
    ) -> None:
        self.session_id = session_id
        self.edge_id = edge_id
        self._secret = auth_secret
        self._limits = limits
        self._clock_ms = clock_ms
        self._client_info = client_info
        self.principal: Principal | None = None
        self._identity: str | None = None  # the first principal's owner, for renewals
        self._auth_failures = 0
        self._routes: dict[str, _Route] = {}
        # One publish in flight per conversation, the rest wait here in order, so Kafka
        # receives a conversation's turns in the order the client sent them.
        self._publishing: dict[str, str] = {}
        self._waiting: dict[str, deque[SubmitTurn]] = {}
        self._audio = AudioBuffers(limits.media)
        self._speech: SpeechSettings | None = None  # the session's default for new turns
        self._detection: TurnDetection | None = None
        self._voice_loop: VoiceLoop | None = None
        # what the user heard of an answer they interrupted, per conversation: the next
        # turn carries it, so its prompt is built from the truncated history
        self._truncations: dict[str, list[Truncation]] = {}
        self._speculative: str | None = None  # the voice loop's turn started on a guess
        # spoken answers whose audio was all sent but may still be playing: a barge-in can
        # still cut them (the client plays in real time; TTS runs faster)
        self._played: dict[str, _Route] = {}

    # ---- inputs ------------------------------------------------------------------------------
    def open(self, token: str | None) -> list[Action]:
        """Connection opened; a token from the URL or header authenticates at once."""
        if token is None:
            return []
        return self._answering_errors(self._authenticate, token)

    def receive(self, frame: str | bytes) -> list[Action]:
        """One WebSocket frame from the client."""
        return self._answering_errors(lambda f: self._handle(self._parse(f)), frame)

    def _answering_errors(self, step: Callable[[Any], list[Action]], arg: Any) -> list[Action]:
        """Run one protocol step; an `EdgeError` becomes an error event, never an exception."""
        try:
            return step(arg)
        except EdgeError as err:
            actions: list[Action] = [error_event(err)]
            if isinstance(err, AuthError) and self._auth_failures >= MAX_AUTH_FAILURES:
                actions.append(Close(CLOSE_POLICY_VIOLATION, "too many failed authentications"))
            return actions

    def submit_succeeded(self, turn_id: str) -> list[Action]:
        route = self._routes.get(turn_id)
        if route is None or route.accepted:
            return []
        route.accepted = True
        actions = [] if route.speculative or route.withdrawn else self._announce(turn_id, route)
        return actions + self._next_submit(route.conversation_id)

    def _announce(self, turn_id: str, route: _Route) -> list[Action]:
        """`turn.accepted`, then the frames that came before it."""
        actions: list[Action] = [
            Send(TurnAccepted(turn_id, route.conversation_id, route.client_turn_id))
        ]
        held, route.held = route.held, []
        for event, position in held:
            actions.extend(self.relay(event, position))
        return actions

    def submit_failed(self, turn_id: str, err: EdgeError) -> list[Action]:
        route = self._routes.pop(turn_id, None)
        client_turn_id = route.client_turn_id if route is not None else None
        actions: list[Action] = [error_event(err, turn_id, client_turn_id)]
        if route is not None and (route.speculative or route.withdrawn):
            # a guess the client never heard of: the utterance's end makes the turn anew
            # (and meets the same error then, if it lasts); what it carried goes back
            actions = []
            if self._speculative == turn_id:
                self._speculative = None
            self._give_back(route)
        if route is not None:
            actions += self._next_submit(route.conversation_id)
        return actions

    def _queue_submit(self, submit: SubmitTurn) -> list[Action]:
        conversation = submit.turn.conversation_id
        if conversation in self._publishing:
            self._waiting.setdefault(conversation, deque()).append(submit)
            return []
        self._publishing[conversation] = submit.turn.turn_id
        return [submit]

    def _next_submit(self, conversation: str) -> list[Action]:
        self._publishing.pop(conversation, None)
        waiting = self._waiting.get(conversation)
        if not waiting:
            self._waiting.pop(conversation, None)
            return []
        return self._queue_submit(waiting.popleft())

    def relay(self, event: AnyEvent, position: LogPosition | None = None) -> list[Action]:
        """A frame of one of this session's turns, from the Redis relay or the turn's log
        (`position`: where it sits in the log; None for frames that are not logged)."""
        route = self._routes.get(event.turn_id)
        if route is None:
            return []
        if route.withdrawn:  # void: its frames go nowhere; its end closes the route
            if isinstance(event, TurnCompleted):
                self._routes.pop(event.turn_id, None)
            return []
        if not route.accepted or route.speculative or route.resuming is not None:
            route.held.append((event, position))
            return []
        if position is not None:
            if route.position is not None and position <= route.position:
                return []  # sent already (a resume's log and the live stream overlap)
            route.position = position
        epoch, offset = position if position is not None else (None, None)
        match event:
            case InputTranscribed():
                transcript = InputTranscript(
                    event.turn_id, event.text, event.segments, event.audio_s, epoch, offset
                )
                return [Send(transcript)]
            case TurnStarted():
                actions = self._new_attempt(route, event.turn_id, event.attempt, epoch)
                return [*actions, Send(ResponseStarted(event.turn_id, event.model, epoch, offset))]
            case TokenChunk() if route.interrupted:
                return []  # stopped: what the engine made before the abort is not shown
            case TokenChunk():
                actions = []
                if event.attempt != route.attempt:  # its turn.started was lost
                    actions = self._new_attempt(route, event.turn_id, event.attempt, epoch)
                if event.seq <= route.last_seq:
                    return actions  # a relay retry delivered it twice
                route.last_seq = event.seq
                route.shown_chars += len(event.text)
                delta = ResponseDelta(event.turn_id, event.seq, event.text, epoch, offset)
                return [*actions, Send(delta)]
            case SpeechAudio():
                return self._audio_frame(route, event)
            case ImageProgress():
                return self._image_progress(route, event)
            case ImageGenerated() if route.interrupted:
                return []
            case ImageGenerated():
                actions = []
                if event.attempt != route.attempt:  # its turn.started was lost
                    actions = self._new_attempt(route, event.turn_id, event.attempt, epoch)
                image = ResponseImage(
                    turn_id=event.turn_id,
                    index=event.index,
                    format=event.format,
                    width=event.width,
                    height=event.height,
                    sha256=event.sha256,
                    seed=event.seed,
                    data=base64.b64encode(event.data).decode(),
                    epoch=epoch,
                    offset=offset,
                )
                return [*actions, Send(image)]
            case TurnCompleted():
                route.text_done = True
                if not route.speech or route.audio_done or route.interrupted:
                    self._close(event.turn_id)
                retract: list[Action] = []
                if event.error is not None and event.error.code == OUTPUT_CUT:
                    retracted = ResponseRetracted(
                        event.turn_id, OUTPUT_CUT, event.text, route.shown_chars
                    )
                    retract.append(Send(retracted))
                return [
                    *retract,
                    Send(
                        ResponseDone(
                            turn_id=event.turn_id,
                            finish_reason=event.finish_reason,
                            text=event.text,
                            usage=event.usage,
                            timings=event.timings,
                            model=event.model,
                            error=event.error,
                            epoch=epoch,
                            offset=offset,
                        )
                    ),
                ]
        return []

    @staticmethod
    def _image_progress(route: _Route, event: ImageProgress) -> list[Action]:
        """A step of a picture's generation (not logged: a resumed client gets the picture,
        not the steps it missed)."""
        if route.interrupted or (route.attempt is not None and event.attempt != route.attempt):
            return []  # stopped, or a step of an attempt that failed over
        preview = base64.b64encode(event.preview).decode() if event.preview else None
        progress = ResponseImageProgress(
            turn_id=event.turn_id,
            step=event.step,
            steps=event.steps,
            width=event.width,
            height=event.height,
            notice=event.notice,
            preview=preview,
            preview_format="jpeg" if preview else None,
        )
        return [Send(progress)]

    def _audio_frame(self, route: _Route, event: SpeechAudio) -> list[Action]:
        if route.interrupted or route.audio_done:
            return []
        if route.attempt is not None and event.attempt != route.attempt:
            return []  # speech of an attempt that failed over
        actions: list[Action] = []
        if event.pcm and event.sample_rate > 0:
            duration_ms = 1000 * len(event.pcm) / 2 / event.sample_rate
            route.timeline.add(event.text, duration_ms)
            if route.first_audio_ms is None:
                route.first_audio_ms = self._clock_ms()
            audio = ResponseAudio(
                turn_id=event.turn_id,
                index=event.index,
                text=event.text,
                char_start=event.char_start,
                sample_rate=event.sample_rate,
                duration_ms=round(duration_ms, 3),
                audio=base64.b64encode(event.pcm).decode(),
            )
            actions.append(Send(audio))
        if event.final:
            actions += self._end_audio(
                route, event.turn_id, event.stopped or "completed", event.error
            )
        return actions

    def _end_audio(
        self, route: _Route, turn_id: str, reason: str, error: ErrorInfo | None = None
    ) -> list[Action]:
        route.audio_done = True
        if route.text_done:
            self._close(turn_id)
        return [Send(ResponseAudioDone(turn_id, reason, error))]

    def _close(self, turn_id: str) -> None:
        """The turn's frames are all sent; a spoken one stays interruptible while it plays."""
        route = self._routes.pop(turn_id, None)
        if route is not None and route.speech and not route.interrupted:
            self._played[turn_id] = route
            while len(self._played) > MAX_PLAYED:
                del self._played[next(iter(self._played))]

    def resume_found(self, turn_id: str, conversation_id: str, after: LogPosition) -> list[Action]:
        """The shell found the turn and it is the user's: open a route that holds live
        frames until the log has been read (the shell routes the relay to it next)."""

        def open_route(_: object) -> list[Action]:
            if turn_id in self._routes:
                raise InvalidMessage(f"turn {turn_id!r} is already streaming in this session")
            self._check_room()
            self._routes[turn_id] = _Route(conversation_id, accepted=True, resuming=after)
            return []

        return self._answering_errors(open_route, None)

    def resume_loaded(
        self,
        turn_id: str,
        plan: ResumePlan,
        entries: list[tuple[AnyEvent, LogPosition]],
        outcome: TurnCompleted | None = None,
    ) -> list[Action]:
        """The turn's log after the client's position was read: `response.resumed`, those
        frames, then the live ones held meanwhile. `outcome` (the recorded `turn.completed`)
        ends an answer whose log is gone."""
        route = self._routes.get(turn_id)
        if route is None or route.resuming is None:
            return []
        finished = outcome is not None or any(isinstance(e, TurnCompleted) for e, _ in entries)
        epoch, offset = plan.position
        actions: list[Action] = [
            Send(
                ResponseResumed(
                    turn_id, route.conversation_id, plan.status, epoch, offset, finished
                )
            )
        ]
        route.resuming = None
        route.position = plan.position if plan.position != START else None
        held, route.held = route.held, []
        for event, position in [*entries, *held]:
            actions.extend(self.relay(event, position))
        if outcome is not None:
            actions.extend(self.relay(outcome))
        return actions

    def resume_failed(self, turn_id: str | None, err: EdgeError) -> list[Action]:
        if turn_id is not None:
            route = self._routes.get(turn_id)
            if route is not None and route.resuming is not None:
                del self._routes[turn_id]
        return [error_event(err, turn_id)]

    def _resume(self, principal: Principal, msg: ResumeResponse) -> list[Action]:
        if (msg.turn_id is None) == (msg.conversation_id is None):
            raise InvalidMessage("response.resume names a turn_id or a conversation_id (one)")
        if msg.turn_id is not None and msg.turn_id in self._routes:
            raise InvalidMessage(f"turn {msg.turn_id!r} is already streaming in this session")
        self._check_room()
        after = LogPosition(msg.epoch, msg.offset)
        return [
            ResumeTurn(
                msg.turn_id, msg.conversation_id, after, principal.owner, principal.tenant_id
            )
        ]

    def _check_room(self) -> None:
        open_turns = len(self._routes) - self._withdrawn_count()
        if open_turns >= self._limits.max_open_turns:
            raise TooManyTurns(f"{open_turns} turns already open; wait for one to finish")

    def speech_timed_out(self, turn_id: str) -> list[Action]:
        """The answer's text ended and its audio stopped coming (no TTS worker, or one
        that died): end the speech instead of keeping the client waiting."""
        route = self._routes.get(turn_id)
        if route is None or not route.speech or route.audio_done or route.interrupted:
            return []
        error = ErrorInfo("tts_unavailable", "speech did not arrive in time", retryable=True)
        return self._end_audio(route, turn_id, "tts_unavailable", error)

    def awaits_audio(self, turn_id: str) -> bool:
        """The turn's text is done but its speech is still coming (the shell's deadline)."""
        route = self._routes.get(turn_id)
        return route is not None and route.speech and route.text_done and not route.audio_done

    @staticmethod
    def _new_attempt(route: _Route, turn_id: str, attempt: str, epoch: int | None) -> list[Action]:
        """A worker starts (or restarts) the answer. A second attempt means the first
        worker died mid-answer and Kafka redelivered the turn: the client must drop what
        it showed, and the new attempt's chunks count from seq 0 again."""
        actions: list[Action] = []
        if route.attempt is not None and route.attempt != attempt:
            actions.append(Send(ResponseRestarted(turn_id, "worker_failover", epoch)))
        route.attempt = attempt
        route.last_seq = -1
        route.shown_chars = 0
        route.timeline = AudioTimeline()
        route.first_audio_ms = None
        return actions

    # ---- state -------------------------------------------------------------------------------
    @property
    def open_turns(self) -> list[str]:
        return list(self._routes)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    # ---- internals ---------------------------------------------------------------------------
    def _parse(self, frame: str | bytes) -> AnyClientMessage:
        if isinstance(frame, bytes):
            raise InvalidMessage("binary frames are not part of protocol v1; send JSON text")
        try:
            size = len(frame.encode())
        except UnicodeEncodeError:  # a lone surrogate: not UTF-8 (websockets never delivers one)
            raise MalformedMessage("the frame is not valid UTF-8 text") from None
        if size > self._limits.max_media_message_bytes:
            raise MessageTooLarge(
                f"message is {size} bytes; the limit is {self._limits.max_media_message_bytes}"
            )
        try:
            envelope = _envelope_decoder.decode(frame)
        except msgspec.ValidationError as exc:
            raise InvalidMessage(f"every message needs a string `type`: {exc}") from None
        except msgspec.DecodeError as exc:
            raise MalformedMessage(f"not valid JSON: {exc}") from None
        except RecursionError:  # nesting deeper than the decoder's stack (found by fuzzing)
            raise MalformedMessage("JSON nested too deeply") from None
        if envelope.type not in CLIENT_TYPES:
            raise UnknownMessageType(
                f"unknown message type {envelope.type!r}; expected one of {sorted(CLIENT_TYPES)}"
            )
        if size > self._limits.max_message_bytes and envelope.type not in MEDIA_TYPES:
            raise MessageTooLarge(
                f"{envelope.type} is {size} bytes; the limit is {self._limits.max_message_bytes}"
                " (only messages with media may be larger)"
            )
        try:
            return client_decoder.decode(frame)
        except msgspec.DecodeError as exc:
            raise InvalidMessage(f"invalid {envelope.type}: {exc}") from None
        except RecursionError:
            raise MalformedMessage("JSON nested too deeply") from None

    def _handle(self, message: AnyClientMessage) -> list[Action]:
        try:
            return self._handle_message(message)
        except EdgeError as err:
            if isinstance(message, CreateTurn):
                err.client_turn_id = message.client_turn_id  # lets the client match it
            raise

    def _handle_message(self, message: AnyClientMessage) -> list[Action]:
        if isinstance(message, Authenticate):
            if self.principal is not None:
                raise InvalidMessage("session is already authenticated")
            if self._auth_failures >= MAX_AUTH_FAILURES:
                raise AuthError("too many failed authentications")
            return self._authenticate(message.token)
        if isinstance(message, Ping):
            return [Send(Pong(message.id))]
        if self.principal is None:
            raise AuthError("authenticate first (session.authenticate or ?token=)")
        if self._clock_ms() / 1000 >= self.principal.expires_at_s:
            self.principal = None  # open turns keep streaming; new requests need a new token
            raise AuthError("token expired: send session.authenticate", code="token_expired")
        if isinstance(message, CreateTurn):
            return self._create_turn(self.principal, message)
        if isinstance(message, CancelTurn):
            route = self._routes.get(message.turn_id)
            if route is None:
                raise UnknownTurn(f"no open turn {message.turn_id!r} in this session")
            return [RequestCancel(message.turn_id, route.conversation_id)]
        if isinstance(message, SessionUpdate):
            return self._update(message)
        if isinstance(message, InterruptTurn):
            self._forget_played()
            route = self._routes.get(message.turn_id) or self._played.get(message.turn_id)
            if route is None:
                raise UnknownTurn(f"no open turn {message.turn_id!r} in this session")
            return self._interrupt(message.turn_id, route, message.audio_end_ms, "interrupt")
        if isinstance(message, AppendAudio):
            if self._detection is not None and message.stream_id == self._detection.stream_id:
                return self._listen(message)
            self._audio.append(message.stream_id, message.data)
            return []
        if isinstance(message, ClearAudio):
            self._audio.clear(message.stream_id)
            return []
        if isinstance(message, ResumeResponse):
            return self._resume(self.principal, message)
        if isinstance(message, Feedback):
            p = self.principal
            return [
                GiveFeedback(message.turn_id, message.kind, message.comment, p.tenant_id, p.user_id)
            ]
        raise UnknownMessageType(f"unhandled message {type(message).__name__}")

    def _authenticate(self, token: str) -> list[Action]:
        try:
            principal = verify_token(self._secret, token)
            if self._identity is not None and self._identity != principal.owner:
                # A renewed token must name the same user: the session's open turns are
                # that user's, and must not pass to anyone else.
                raise AuthError("a session cannot change its user", code="token_invalid")
        except AuthError:
            self._auth_failures += 1
            raise
        self.principal = principal
        self._identity = principal.owner
        return [
            Send(
                SessionReady(
                    self.session_id, self.edge_id, self.principal.user_id, self.principal.tenant_id
                )
            )
        ]

    # ---- speech ------------------------------------------------------------------------------
    def _update(self, msg: SessionUpdate) -> list[Action]:
        actions: list[Action] = []
        if msg.speech is not msgspec.UNSET:
            self._speech = self._speech_settings(msg.speech)
        if msg.turn_detection is not msgspec.UNSET:
            detection = msg.turn_detection
            if detection != self._detection:
                actions += self._withdraw()  # a guess of the old loop is void
            if detection is not None and (
                self._detection is None or detection.stream_id != self._detection.stream_id
            ):
                self._voice_loop = VoiceLoop(self._limits.vad)
                self._audio.clear(detection.stream_id)
            elif detection is None:
                self._voice_loop = None
            self._detection = detection
        speech = SpeechOptions(self._speech.voice) if self._speech is not None else None
        return [*actions, Send(SessionUpdated(speech, self._detection, list(self._limits.voices)))]

    def _speech_settings(self, options: SpeechOptions | None) -> SpeechSettings | None:
        if options is None:
            return None
        voice = options.voice.strip().lower()
        if voice not in self._limits.voices:
            raise InvalidMessage(
                f"unknown voice {options.voice!r}; this deployment offers "
                f"{', '.join(self._limits.voices)}",
                code="unknown_voice",
            )
        return SpeechSettings(voice=voice)

    def _interrupt(
        self, turn_id: str, route: _Route, audio_end_ms: float | None, reason: str
    ) -> list[Action]:
        """Stop an answer everywhere and keep in the history what the user heard."""
        if route.interrupted:
            return []
        route.interrupted = True
        self._played.pop(turn_id, None)
        actions: list[Action] = [DropAudio(turn_id)]
        if not (route.text_done and route.audio_done):  # generation or speech still running
            actions.append(RequestCancel(turn_id, route.conversation_id, reason))
        if route.speech and not route.audio_done:
            route.audio_done = True
            actions.append(Send(ResponseAudioDone(turn_id, "interrupted")))
        if route.speech and self.principal is not None:
            played = self._played_ms(route) if audio_end_ms is None else audio_end_ms
            played = min(played, route.timeline.total_ms)
            truncation = Truncation(turn_id, route.timeline.heard(played), round(played, 3))
            self._truncations.setdefault(route.conversation_id, []).append(truncation)
            actions.append(
                Send(ResponseTruncated(turn_id, truncation.audio_end_ms, truncation.text))
            )
            actions += self._record_truncation(route, truncation, reason)
        if route.text_done:
            self._close(turn_id)
        return actions

    def _played_ms(self, route: _Route) -> float:
        """The edge's estimate of how far playback got: since the first audio left, real time
        (a client plays at 1x), never past the audio it was sent."""
        if route.first_audio_ms is None:
            return 0.0
        return max(0.0, self._clock_ms() - route.first_audio_ms)

    def _speaking(self) -> list[tuple[str, _Route]]:
        """Answers whose voice the user may be hearing now: audio still coming, or sent and
        (by the real-time estimate) still playing."""
        speaking = [
            (turn_id, r)
            for turn_id, r in self._routes.items()
            if r.speech and not (r.interrupted or r.audio_done or r.speculative or r.withdrawn)
        ]
        self._forget_played()
        return speaking + list(self._played.items())

    def _forget_played(self) -> None:
        """Drop the answers that (by the real-time estimate) finished playing: nothing is
        left of them to cut."""
        for turn_id, r in list(self._played.items()):
            if r.first_audio_ms is None or self._played_ms(r) >= r.timeline.total_ms:
                del self._played[turn_id]

    def _listen(self, msg: AppendAudio) -> list[Action]:
        assert self._voice_loop is not None
        pcm = decode_base64(msg.data, "audio.append")
        if len(pcm) % 2:
            raise InvalidMessage("audio.append: PCM16 audio has an even number of bytes")
        frames = self._voice_loop.append(pcm)
        return [DetectSpeech(msg.stream_id, frames)] if frames else []

    def voice_activity(self, stream_id: str, frames: bytes, probs: list[float]) -> list[Action]:
        """Scores of the frames a `DetectSpeech` asked for: speech starts, barge-ins, turns."""
        return self._answering_errors(lambda _: self._voice_events(stream_id, frames, probs), None)

    def _voice_events(self, stream_id: str, frames: bytes, probs: list[float]) -> list[Action]:
        loop, detection = self._voice_loop, self._detection
        if loop is None or detection is None or detection.stream_id != stream_id:
            return []  # the loop was turned off meanwhile
        actions: list[Action] = []
        speaking = self._speaking()
        for event in loop.scored(frames, probs, assistant_speaking=bool(speaking)):
            # each event on its own: a refused utterance must not drop a barge-in's actions
            actions += self._answering_errors(self._voice_event, (stream_id, detection, event))
        return actions

    def _voice_event(self, args: tuple[str, TurnDetection, VoiceEvent]) -> list[Action]:
        stream_id, detection, event = args
        match event:
            case SpeechStarted(at_ms):
                return [Send(InputSpeechStarted(stream_id, at_ms))]
            case BargeIn():
                actions: list[Action] = []
                for turn_id, route in self._speaking():
                    actions += self._interrupt(turn_id, route, None, "barge_in")
                return actions
            case SpeechPaused():
                try:
                    return self._speculate(detection, event)
                except EdgeError:  # a guess is best effort: the utterance's end decides
                    return []
            case SpeechResumed():
                return self._withdraw()
            case SpeechEnded() if event.backchannel:
                return [Send(InputSpeechStopped(stream_id, event.end_ms, ignored="backchannel"))]
            case SpeechEnded():
                confirmed = self._confirm(detection, event)
                if confirmed is not None:
                    return confirmed
                return self._utterance_turn(detection, event)
        return []

    def _withdrawn_count(self) -> int:
        """Withdrawn guesses still closing (they do not count as the user's open turns)."""
        return sum(r.withdrawn for r in self._routes.values())

    def _speculate(self, detection: TurnDetection, paused: SpeechPaused) -> list[Action]:
        """Start answering the utterance so far, unseen until the silence rule confirms it.
        Not while many wrong guesses are still closing (a user who pauses a lot): then the
        silence rule alone decides."""
        if self._withdrawn_count() >= self._limits.max_open_turns:
            return []
        actions = self._submit_utterance(detection, paused.pcm)
        turn_id = next(reversed(self._routes))
        self._routes[turn_id].speculative = True
        self._speculative = turn_id
        return actions

    def _confirm(self, detection: TurnDetection, ended: SpeechEnded) -> list[Action] | None:
        """The guess was right: the client hears of the turn now, with what it produced."""
        turn_id, self._speculative = self._speculative, None
        route = self._routes.get(turn_id) if turn_id is not None else None
        if route is None or not route.speculative:
            return None  # refused meanwhile (or no guess): the utterance becomes a turn now
        route.speculative = False
        stopped = InputSpeechStopped(detection.stream_id, ended.end_ms, turn_id=turn_id)
        announced = self._announce(turn_id, route) if route.accepted else []
        return [Send(stopped), *announced]

    def _withdraw(self) -> list[Action]:
        """The user went on talking: the guessed turn is void (stopped, and kept out of the
        history by a withdrawal the next turn carries); the utterance continues."""
        turn_id, self._speculative = self._speculative, None
        route = self._routes.get(turn_id) if turn_id is not None else None
        if route is None:
            return []
        route.speculative, route.withdrawn = False, True
        withdrawal = Truncation(turn_id, "", withdrawn=True)
        self._give_back(route)
        self._truncations.setdefault(route.conversation_id, []).append(withdrawal)
        cancel = RequestCancel(turn_id, route.conversation_id, "withdrawn")
        return [cancel, *self._record_truncation(route, withdrawal, "withdrawn")]

    def _record_truncation(
        self, route: _Route, truncation: Truncation, reason: str
    ) -> list[Action]:
        """Publish it (Kafka `turns.completed`); not when the token expired meanwhile (the
        next turn still carries it)."""
        if self.principal is None:
            return []
        event = TurnTruncated(
            turn_id=truncation.turn_id,
            conversation_id=route.conversation_id,
            tenant_id=self.principal.tenant_id,
            user_id=self.principal.user_id,
            truncation=truncation,
            reason=reason,
            truncated_at_ms=self._clock_ms(),
        )
        return [PublishTruncation(event)]

    def _give_back(self, route: _Route) -> None:
        """A void guess returns the truncations it carried: the next turn carries them."""
        pending = self._truncations.get(route.conversation_id, [])
        if route.carried:
            self._truncations[route.conversation_id] = [*route.carried, *pending]
            route.carried = []

    def _utterance_turn(self, detection: TurnDetection, ended: SpeechEnded) -> list[Action]:
        """An utterance of the voice loop becomes a turn, like a `turn.create` with audio."""
        actions = self._submit_utterance(detection, ended.pcm)
        turn_id = next(reversed(self._routes))  # the route it just opened
        stopped = InputSpeechStopped(detection.stream_id, ended.end_ms, turn_id=turn_id)
        return [Send(stopped), *actions]

    def _submit_utterance(self, detection: TurnDetection, pcm: bytes) -> list[Action]:
        if self.principal is None:  # expired while its audio was being scored
            raise AuthError("token expired: send session.authenticate", code="token_expired")
        self._audio.clear(detection.stream_id)
        self._audio.append(detection.stream_id, base64.b64encode(pcm).decode())
        msg = CreateTurn(
            conversation_id=detection.conversation_id,
            parts=[AudioPart(stream_id=detection.stream_id, format="pcm16", sample_rate=16000)],
        )
        return self._create_turn(self.principal, msg)

    def _create_turn(self, principal: Principal, msg: CreateTurn) -> list[Action]:
        self._check_room()
        turn_id = turn_id_for(principal, msg.conversation_id, msg.client_turn_id)
        if turn_id in self._routes:
            raise InvalidMessage(f"turn {msg.client_turn_id!r} is already in flight")
        content = turn_content(msg, self._audio, self._limits.media)
        defaults = DecodingParams(max_tokens=self._limits.default_max_tokens)
        decoding = DecodingParams(
            max_tokens=msg.max_tokens or defaults.max_tokens,
            temperature=defaults.temperature if msg.temperature is None else msg.temperature,
            repetition_penalty=self._limits.default_repetition_penalty,
        )
        speech = self._speech if msg.speech is msgspec.UNSET else self._speech_settings(msg.speech)
        turn = TurnSubmitted(
            turn_id=turn_id,
            conversation_id=msg.conversation_id,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            edge_id=self.edge_id,
            text=content.text,
            submitted_at_ms=self._clock_ms(),
            decoding=decoding,
            client=self._client_info,
            media=content.media,
            speech=speech,
            truncates=self._truncations.pop(msg.conversation_id, []),
            image=_image_request(msg),
        )
        route = _Route(msg.conversation_id, msg.client_turn_id, speech=speech is not None)
        route.carried = turn.truncates
        self._routes[turn_id] = route
        return self._queue_submit(SubmitTurn(turn, principal.owner, tuple(content.uploads)))


def _image_request(msg: CreateTurn) -> ImageRequest | None:
    """The turn's picture options as the image worker reads them (it clamps them)."""
    if msg.image is None:
        return None
    options = msg.image
    return ImageRequest(options.width, options.height, options.steps, options.seed)
