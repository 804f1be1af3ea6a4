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

The actions it returns are in `ws_edge.actions`, a turn's route in `ws_edge.route`, and the
voice half of the protocol (speech settings, guessed turns, barge-in) in `ws_edge.voice.turns`,
a mixin working on the same state.
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
    FinishReason,
    ImageGenerated,
    ImageProgress,
    InputTranscribed,
    Message,
    Role,
    SpeechAudio,
    SpeechDelivered,
    SpeechSettings,
    TokenChunk,
    Truncation,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
)
from schemas.events import ImageOptions as ImageRequest
from schemas.tools import call_id
from schemas.turn_log import START, LogPosition, ResumePlan
from ws_edge.actions import (
    Action,
    Close,
    FollowTurn,
    GiveFeedback,
    RecordSpeech,
    RequestCancel,
    ResolveApiKey,
    ResumeTurn,
    Send,
    SubmitTurn,
)
from ws_edge.auth import Principal, is_api_key, verify_token
from ws_edge.errors import (
    AuthError,
    EdgeError,
    InvalidMessage,
    MalformedMessage,
    MediaTooLarge,
    MessageTooLarge,
    TooManyTurns,
    UnknownMessageType,
    UnknownTurn,
)
from ws_edge.media import AudioBuffers, MediaLimits, turn_content
from ws_edge.messages import (
    CLIENT_TYPES,
    MEDIA_TYPES,
    AnyClientMessage,
    AppendAudio,
    Authenticate,
    CancelTurn,
    ClearAudio,
    CreateTurn,
    ErrorEvent,
    Feedback,
    FunctionTool,
    InputTranscript,
    InterruptTurn,
    McpTool,
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
    ResponseToolCallDelta,
    ResponseToolCallDone,
    ResumeResponse,
    SessionReady,
    SessionUpdate,
    ToolChoiceOption,
    TurnAccepted,
    TurnDetection,
    client_decoder,
)
from ws_edge.response_format import decoding_format
from ws_edge.route import Route
from ws_edge.server_tools import ServerTools
from ws_edge.tools import turn_tools
from ws_edge.voice.audio_timeline import AudioTimeline
from ws_edge.voice.loop import (
    VadRules,
    VoiceLoop,
)
from ws_edge.voice.turns import VoiceTurns

MAX_AUTH_FAILURES = 3
MAX_PLAYED = 4  # spoken answers kept interruptible after their last frame
CLOSE_POLICY_VIOLATION = 4401
_TURN_ID_NAMESPACE = uuid.UUID("6f1b9a52-3c8e-4d1a-9a57-2b8e0c1d7f10")


@dataclass(frozen=True, slots=True)
class SessionLimits:
    max_message_bytes: int = 32 * 1024
    max_open_turns: int = 8
    default_max_tokens: int = 256
    default_frequency_penalty: float = 0.8  # TURNSTREAM_DEFAULT_FREQUENCY_PENALTY
    max_history_chars: int = 200_000  # a carried history's (TURNSTREAM_HISTORY_MAX_CHARS)
    max_schema_bytes: int = 16 * 1024  # a response_format's (TURNSTREAM_MAX_SCHEMA_BYTES)
    media: MediaLimits = field(default_factory=MediaLimits)
    max_media_message_bytes: int = 16 * 1024 * 1024  # turn.create / audio.append frames
    voices: tuple[str, ...] = ("joe", "espeak")  # what the TTS workers offer
    vad: VadRules = field(default_factory=VadRules)


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


class Session(VoiceTurns):
    def __init__(
        self,
        *,
        session_id: str,
        edge_id: str,
        auth_secret: str,
        limits: SessionLimits,
        clock_ms: Callable[[], float],
        client_info: str = "",
        server_tools: ServerTools | None = None,
    ) -> None:
        self.session_id = session_id
        self._server_tools = server_tools or ServerTools()
        self.edge_id = edge_id
        self._secret = auth_secret
        self._limits = limits
        self._clock_ms = clock_ms
        self._client_info = client_info
        self.principal: Principal | None = None
        self._identity: str | None = None  # the first principal's owner, for renewals
        self._auth_failures = 0
        self._routes: dict[str, Route] = {}
        # One publish in flight per conversation, the rest wait here in order, so Kafka
        # receives a conversation's turns in the order the client sent them.
        self._publishing: dict[str, str] = {}
        self._waiting: dict[str, deque[SubmitTurn]] = {}
        self._audio = AudioBuffers(limits.media)
        self._speech: SpeechSettings | None = None  # the session's default for new turns
        self._detection: TurnDetection | None = None
        # the session's tools (session.update): turns without their own offer these
        self._tools: list[FunctionTool | McpTool] = []
        self._tool_choice: ToolChoiceOption | None = None
        self._voice_loop: VoiceLoop | None = None
        self._interim_reading = False  # a `TranscribeSoFar` is out (one at a time)
        # what the user heard of an answer they interrupted, per conversation: the next
        # turn carries it, so its prompt is built from the truncated history
        self._truncations: dict[str, list[Truncation]] = {}
        self._speculative: str | None = None  # the voice loop's turn started on a guess
        # spoken answers whose audio was all sent but may still be playing: a barge-in can
        # still cut them (the client plays in real time; TTS runs faster)
        self._played: dict[str, Route] = {}

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

    def submit_succeeded(
        self,
        turn_id: str,
        earlier: list[tuple[AnyEvent, LogPosition]] | None = None,
        outcome: TurnCompleted | None = None,
    ) -> list[Action]:
        """The turn is in Kafka. `earlier`: a retried turn's log, read after its publish (its
        first try may have reached Kafka although the client was told it had not, and be
        answering already: the retry catches up as a resume does); `outcome`: its recorded
        end when the log is gone."""
        route = self._routes.get(turn_id)
        if route is None or route.accepted:
            return []
        route.accepted = True
        if route.speculative or route.withdrawn:
            actions: list[Action] = []
        else:
            actions = self._announce(turn_id, route, earlier, outcome)
        return actions + self._next_submit(route.conversation_id)

    def _announce(
        self,
        turn_id: str,
        route: Route,
        earlier: list[tuple[AnyEvent, LogPosition]] | None = None,
        outcome: TurnCompleted | None = None,
    ) -> list[Action]:
        """`turn.accepted`, then the frames that came before it: the log's, then those held
        meanwhile (where they overlap, the position check drops the second copy)."""
        actions: list[Action] = [
            Send(TurnAccepted(turn_id, route.conversation_id, route.client_turn_id))
        ]
        held, route.held = route.held, []
        for event, position in [*(earlier or []), *held]:
            actions.extend(self.relay(event, position))
        if outcome is not None:
            actions.extend(self.relay(outcome))
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
            return self._guess_heard(route, event) if route.speculative else []
        if position is not None:
            if route.position is not None and position <= route.position:
                return []  # sent already (a resume's log and the live stream overlap)
            route.position = position
        epoch, offset = position if position is not None else (None, None)
        match event:
            case InputTranscribed():
                transcript = InputTranscript(
                    event.turn_id,
                    event.text,
                    event.segments,
                    event.audio_s,
                    epoch,
                    offset,
                    language=event.language,
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
                if event.call_index >= 0:  # a piece of a tool call, not of the answer's text
                    piece = ResponseToolCallDelta(
                        event.turn_id,
                        event.call_index,
                        call_id(event.turn_id, event.call_index),
                        event.text,
                        epoch,
                        offset,
                    )
                    return [*actions, Send(piece)]
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
                # the calls ride on the completion's record: only `response.done` carries its
                # position, so a client cut off between them resumes to all of them again
                # (a call is known by its call_id, so a repeat is recognised)
                calls = [
                    Send(ResponseToolCallDone(event.turn_id, i, c.call_id, c.name, c.arguments))
                    for i, c in enumerate(event.tool_calls)
                ]
                return [
                    *retract,
                    *calls,
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
                            tool_calls=event.tool_calls,
                            continued_by=event.continued_by or None,
                        )
                    ),
                    *self._nothing_to_speak(route, event),
                    *self._follow(route, event),
                ]
        return []

    def _follow(self, route: Route, event: TurnCompleted) -> list[Action]:
        """The answer called the deployment's tools: its continuation streams here next
        (once per session: a resumed log's repeat of the same answer follows nothing new)."""
        turn = event.continuation
        if turn is None or self.principal is None or turn.turn_id in self._routes:
            return []
        follower = Route(route.conversation_id, accepted=True, resuming=START, speech=route.speech)
        self._routes[turn.turn_id] = follower
        return [FollowTurn(turn, self.principal.owner)]

    def follow_loaded(
        self,
        turn_id: str,
        entries: list[tuple[AnyEvent, LogPosition]],
        outcome: TurnCompleted | None = None,
    ) -> list[Action]:
        """A continuation's log so far was read: its frames, then the live ones held
        meanwhile (no `response.resumed`: the client was told by `continued_by`)."""
        route = self._routes.get(turn_id)
        if route is None or route.resuming is None:
            return []
        route.resuming = None
        held, route.held = route.held, []
        actions: list[Action] = []
        for event, position in [*entries, *held]:
            actions.extend(self.relay(event, position))
        if outcome is not None:
            actions.extend(self.relay(outcome))
        return actions

    def _nothing_to_speak(self, route: Route, event: TurnCompleted) -> list[Action]:
        """An answer that ended with no text (refused by the input screen, failed before
        an engine ran, or empty) has no speech coming: end it now, not after the speech
        deadline (before, a blocked spoken turn kept its client waiting 30 s)."""
        if event.text or not route.speech or route.audio_done or route.interrupted:
            return []
        finish = event.finish_reason
        reason = "completed" if finish in (FinishReason.STOP, FinishReason.LENGTH) else str(finish)
        return self._end_audio(route, event.turn_id, reason, event.error)

    @staticmethod
    def _image_progress(route: Route, event: ImageProgress) -> list[Action]:
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

    def _audio_frame(self, route: Route, event: SpeechAudio) -> list[Action]:
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
        self, route: Route, turn_id: str, reason: str, error: ErrorInfo | None = None
    ) -> list[Action]:
        route.audio_done = True
        if route.text_done:
            self._close(turn_id)
        return [
            Send(ResponseAudioDone(turn_id, reason, error)),
            *self._delivered(route, turn_id, reason),
        ]

    def _delivered(self, route: Route, turn_id: str, reason: str) -> list[Action]:
        """Record when the answer's first audio went out and how it ended (the speech hops
        of its trace); not for a guess the client never heard of."""
        if self.principal is None or route.speculative or route.withdrawn:
            return []
        delivered = SpeechDelivered(
            turn_id=turn_id,
            conversation_id=route.conversation_id,
            tenant_id=self.principal.tenant_id,
            user_id=self.principal.user_id,
            edge_id=self.edge_id,
            first_audio_at_ms=round(route.first_audio_ms or 0.0, 3),
            ended_at_ms=round(self._clock_ms(), 3),
            audio_ms=round(route.timeline.total_ms, 3),
            reason=reason,
        )
        return [RecordSpeech(delivered)]

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
            self._routes[turn_id] = Route(conversation_id, accepted=True, resuming=after)
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
    def _new_attempt(route: Route, turn_id: str, attempt: str, epoch: int | None) -> list[Action]:
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

    def unfinished(self) -> list[tuple[str, str]]:
        """(turn, conversation) of the answers this client was still being sent: accepted,
        not a guess (speculative or withdrawn)."""
        return [
            (turn_id, route.conversation_id)
            for turn_id, route in self._routes.items()
            if route.accepted and not route.speculative and not route.withdrawn
        ]

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
        if is_api_key(token):
            return [ResolveApiKey(token)]  # the shell looks it up, then admit / key_refused
        try:
            principal = verify_token(self._secret, token)
            if self._identity is not None and self._identity != principal.owner:
                # A renewed token must name the same user: the session's open turns are
                # that user's, and must not pass to anyone else.
                raise AuthError("a session cannot change its user", code="token_invalid")
        except AuthError:
            self._auth_failures += 1
            raise
        return self.admit(principal)

    def admit(self, principal: Principal) -> list[Action]:
        """Authenticated: by a signed token, or as the principal the shell resolved an API
        key to (`ws_edge.api_keys`)."""
        if self._identity is not None and self._identity != principal.owner:
            return self.key_refused(
                AuthError("a session cannot change its user", code="token_invalid")
            )
        self.principal = principal
        self._identity = principal.owner
        return [
            Send(
                SessionReady(self.session_id, self.edge_id, principal.user_id, principal.tenant_id)
            )
        ]

    def key_refused(self, err: EdgeError) -> list[Action]:
        """The shell could not admit the API key: an unknown or revoked key counts as a
        failed authentication; a store that did not answer does not."""
        if isinstance(err, AuthError):
            self._auth_failures += 1
        actions: list[Action] = [error_event(err)]
        if self._auth_failures >= MAX_AUTH_FAILURES:
            actions.append(Close(CLOSE_POLICY_VIOLATION, "too many failed authentications"))
        return actions

    def _create_turn(
        self,
        principal: Principal,
        msg: CreateTurn,
        *,
        speculative: bool = False,
        speech_ended_at_ms: float = 0.0,
        judge_sentence_end: bool = False,
    ) -> list[Action]:
        self._check_room()
        turn_id = turn_id_for(principal, msg.conversation_id, msg.client_turn_id)
        if turn_id in self._routes:
            raise InvalidMessage(f"turn {msg.client_turn_id!r} is already in flight")
        content = turn_content(msg, self._audio, self._limits.media)
        defaults = DecodingParams(max_tokens=self._limits.default_max_tokens)
        decoding = DecodingParams(
            max_tokens=msg.max_tokens or defaults.max_tokens,
            temperature=defaults.temperature if msg.temperature is None else msg.temperature,
            top_p=defaults.top_p if msg.top_p is None else msg.top_p,
            frequency_penalty=self._limits.default_frequency_penalty,
            seed=msg.seed,
            stop=list(msg.stop),
            response_format=decoding_format(
                msg.response_format, max_bytes=self._limits.max_schema_bytes
            ),
        )
        history = carried_history(msg, self._limits.max_history_chars)
        if not msg.tools and msg.tool_choice is None and self._tools:
            msg = msgspec.structs.replace(msg, tools=self._tools, tool_choice=self._tool_choice)
        tools, tool_choice, tool_results = turn_tools(
            msg,
            max_schema_bytes=self._limits.max_schema_bytes,
            tenant=principal.tenant_id,
            server_tools=self._server_tools,
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
            history=history,
            instructions=msg.instructions,
            tools=tools,
            tool_choice=tool_choice,
            tool_results=tool_results,
            speculative=speculative,
            speech_ended_at_ms=round(speech_ended_at_ms, 3),
            judge_sentence_end=judge_sentence_end,
        )
        route = Route(msg.conversation_id, msg.client_turn_id, speech=speech is not None)
        route.carried = turn.truncates
        route.confirm_tools = speculative and any(t.server and not t.read_only for t in tools)
        self._routes[turn_id] = route
        return self._queue_submit(SubmitTurn(turn, principal.owner, tuple(content.uploads)))


def carried_history(msg: CreateTurn, max_chars: int) -> list[Message] | None:
    """The history the client sent, held to what the server keeps of a conversation's own
    (TURNSTREAM_HISTORY_MAX_CHARS), the instructions counted with it."""
    chars = len(msg.instructions) + sum(len(m.content) for m in msg.history or ())
    if chars > max_chars:
        raise MediaTooLarge(
            f"history and instructions are {chars} characters; the limit is {max_chars}"
        )
    if msg.history is None:
        return None
    return [Message(Role(m.role), m.content) for m in msg.history]


def _image_request(msg: CreateTurn) -> ImageRequest | None:
    """The turn's picture options as the image worker reads them (it clamps them)."""
    if msg.image is None:
        return None
    options = msg.image
    return ImageRequest(options.width, options.height, options.steps, options.seed)
