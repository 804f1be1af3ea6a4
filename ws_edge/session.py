"""One client session as a pure state machine: frames and relay events in, actions out.

No sockets, no Redis, no Kafka here (the shape of python-websockets' `protocol.py`): the
asyncio shell in `ws_edge.server` feeds it and carries out the actions it returns. That keeps
every protocol rule testable without a loop.

Turn lifecycle at the edge: `turn.create` → SubmitTurn (the shell claims the conversation and
publishes to Kafka) → `submit_succeeded` sends `turn.accepted` → relayed frames stream as
`response.*` → `response.done` closes the route. Frames that race ahead of the Kafka ack are
held until `turn.accepted` is sent, so the client always sees them in order.
"""

from __future__ import annotations

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
    FeedbackKind,
    InputTranscribed,
    TokenChunk,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
)
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
from ws_edge.media import AudioBuffers, MediaLimits, Upload, turn_content
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
    InputTranscript,
    Ping,
    Pong,
    ResponseDelta,
    ResponseDone,
    ResponseRestarted,
    ResponseRetracted,
    ResponseStarted,
    ServerEvent,
    SessionReady,
    TurnAccepted,
    client_decoder,
)

MAX_AUTH_FAILURES = 3
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
    turn_id: str
    conversation_id: str


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
class Close:
    code: int
    reason: str


Action = Send | SubmitTurn | RequestCancel | GiveFeedback | Close


@dataclass(frozen=True, slots=True)
class SessionLimits:
    max_message_bytes: int = 32 * 1024
    max_open_turns: int = 8
    default_max_tokens: int = 256
    media: MediaLimits = field(default_factory=MediaLimits)
    max_media_message_bytes: int = 16 * 1024 * 1024  # turn.create / audio.append frames


@dataclass(slots=True)
class _Route:
    conversation_id: str
    client_turn_id: str | None = None
    accepted: bool = False
    held: list[AnyEvent] = field(default_factory=list)
    attempt: str | None = None  # the answer being streamed now
    last_seq: int = -1
    shown_chars: int = 0  # characters of the current attempt's deltas sent to the client


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
        actions: list[Action] = [
            Send(TurnAccepted(turn_id, route.conversation_id, route.client_turn_id))
        ]
        held, route.held = route.held, []
        for event in held:
            actions.extend(self.relay(event))
        return actions + self._next_submit(route.conversation_id)

    def submit_failed(self, turn_id: str, err: EdgeError) -> list[Action]:
        route = self._routes.pop(turn_id, None)
        client_turn_id = route.client_turn_id if route is not None else None
        actions: list[Action] = [error_event(err, turn_id, client_turn_id)]
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

    def relay(self, event: AnyEvent) -> list[Action]:
        """A frame of one of this session's turns, from the Redis relay."""
        route = self._routes.get(event.turn_id)
        if route is None:
            return []
        if not route.accepted:
            route.held.append(event)
            return []
        match event:
            case InputTranscribed():
                return [
                    Send(InputTranscript(event.turn_id, event.text, event.segments, event.audio_s))
                ]
            case TurnStarted():
                actions = self._new_attempt(route, event.turn_id, event.attempt)
                return [*actions, Send(ResponseStarted(event.turn_id, event.model))]
            case TokenChunk():
                actions = []
                if event.attempt != route.attempt:  # its turn.started was lost
                    actions = self._new_attempt(route, event.turn_id, event.attempt)
                if event.seq <= route.last_seq:
                    return actions  # a relay retry delivered it twice
                route.last_seq = event.seq
                route.shown_chars += len(event.text)
                return [*actions, Send(ResponseDelta(event.turn_id, event.seq, event.text))]
            case TurnCompleted():
                del self._routes[event.turn_id]
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
                        )
                    ),
                ]
        return []

    @staticmethod
    def _new_attempt(route: _Route, turn_id: str, attempt: str) -> list[Action]:
        """A worker starts (or restarts) the answer. A second attempt means the first
        worker died mid-answer and Kafka redelivered the turn: the client must drop what
        it showed, and the new attempt's chunks count from seq 0 again."""
        actions: list[Action] = []
        if route.attempt is not None and route.attempt != attempt:
            actions.append(Send(ResponseRestarted(turn_id, "worker_failover")))
        route.attempt = attempt
        route.last_seq = -1
        route.shown_chars = 0
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
        size = len(frame.encode())
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
        if isinstance(message, AppendAudio):
            self._audio.append(message.stream_id, message.data)
            return []
        if isinstance(message, ClearAudio):
            self._audio.clear(message.stream_id)
            return []
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

    def _create_turn(self, principal: Principal, msg: CreateTurn) -> list[Action]:
        if len(self._routes) >= self._limits.max_open_turns:
            raise TooManyTurns(f"{len(self._routes)} turns already open; wait for one to finish")
        turn_id = turn_id_for(principal, msg.conversation_id, msg.client_turn_id)
        if turn_id in self._routes:
            raise InvalidMessage(f"turn {msg.client_turn_id!r} is already in flight")
        content = turn_content(msg, self._audio, self._limits.media)
        defaults = DecodingParams(max_tokens=self._limits.default_max_tokens)
        decoding = DecodingParams(
            max_tokens=msg.max_tokens or defaults.max_tokens,
            temperature=defaults.temperature if msg.temperature is None else msg.temperature,
        )
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
        )
        self._routes[turn_id] = _Route(msg.conversation_id, msg.client_turn_id)
        return self._queue_submit(SubmitTurn(turn, principal.owner, tuple(content.uploads)))
