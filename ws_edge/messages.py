"""The client protocol's messages (WebSocket JSON text frames), both directions.

Client → edge: `session.authenticate`, `turn.create`, `turn.cancel`, `ping`.
Edge → client: `session.ready`, `turn.accepted`, `response.started`, `response.delta`,
`response.restarted`, `response.done`, `error`, `pong`. Unknown fields are rejected so typos
surface at once.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from schemas.events import ErrorInfo, FinishReason, Timings, Usage

PROTOCOL_VERSION = 1
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"

Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
Text = Annotated[str, msgspec.Meta(min_length=1)]


class ClientMessage(msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=True):
    pass


class Authenticate(ClientMessage, tag="session.authenticate"):
    token: str


class CreateTurn(ClientMessage, tag="turn.create"):
    """Ask for an answer. `client_turn_id` makes a retry idempotent (same turn, answered once)."""

    conversation_id: Id
    text: Text
    client_turn_id: Id | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None


class CancelTurn(ClientMessage, tag="turn.cancel"):
    turn_id: Id


class Ping(ClientMessage, tag="ping"):
    id: Id | None = None


AnyClientMessage = Authenticate | CreateTurn | CancelTurn | Ping
CLIENT_TYPES = frozenset(t.__struct_config__.tag for t in AnyClientMessage.__args__)  # type: ignore[attr-defined]


class ServerEvent(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    pass


class SessionReady(ServerEvent, tag="session.ready"):
    session_id: str
    edge_id: str
    user_id: str
    tenant_id: str
    protocol: int = PROTOCOL_VERSION


class TurnAccepted(ServerEvent, tag="turn.accepted"):
    turn_id: str
    conversation_id: str
    client_turn_id: str | None = None


class ResponseStarted(ServerEvent, tag="response.started"):
    turn_id: str
    model: str


class ResponseRestarted(ServerEvent, tag="response.restarted"):
    """The answer starts over (its worker failed and another took the turn): discard the
    text shown so far; `response.started` and deltas from seq 0 follow."""

    turn_id: str
    reason: str


class ResponseDelta(ServerEvent, tag="response.delta"):
    turn_id: str
    seq: int
    text: str


class ResponseDone(ServerEvent, tag="response.done"):
    turn_id: str
    finish_reason: FinishReason
    text: str
    usage: Usage
    timings: Timings
    model: str
    error: ErrorInfo | None = None


class ErrorEvent(ServerEvent, tag="error"):
    code: str
    message: str
    retryable: bool = False
    turn_id: str | None = None
    client_turn_id: str | None = None  # echoes the `turn.create` this error answers


class Pong(ServerEvent, tag="pong"):
    id: str | None = None


AnyServerEvent = (
    SessionReady
    | TurnAccepted
    | ResponseStarted
    | ResponseRestarted
    | ResponseDelta
    | ResponseDone
    | ErrorEvent
    | Pong
)

client_decoder = msgspec.json.Decoder(AnyClientMessage)
server_decoder = msgspec.json.Decoder(AnyServerEvent)
_encoder = msgspec.json.Encoder()


def encode_server(event: ServerEvent) -> str:
    return _encoder.encode(event).decode()


def encode_client(message: ClientMessage) -> str:
    return _encoder.encode(message).decode()
