"""The client protocol's messages (WebSocket JSON text frames), both directions.

Client → edge: `session.authenticate`, `turn.create`, `turn.cancel`, `audio.append`,
`audio.clear`, `feedback`, `ping`.
Edge → client: `session.ready`, `turn.accepted`, `input.transcript`, `response.started`,
`response.delta`, `response.restarted`, `response.done`, `feedback.recorded`, `error`,
`pong`. Unknown fields are
rejected so typos surface at once.

Media: a `turn.create` carries `parts` (text, images inline as base64 or by https URL, audio
inline or from a stream the client filled with `audio.append`). Binary data travels base64
encoded inside JSON text frames.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from schemas.events import (
    ErrorInfo,
    FeedbackKind,
    FinishReason,
    Timings,
    TranscriptSegment,
    Usage,
)

PROTOCOL_VERSION = 1
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"

Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
Text = Annotated[str, msgspec.Meta(min_length=1)]


class ClientMessage(msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=True):
    pass


class Authenticate(ClientMessage, tag="session.authenticate"):
    token: str


class TextPart(
    msgspec.Struct, frozen=True, tag_field="type", tag="text", forbid_unknown_fields=True
):
    text: Text


class ImagePart(
    msgspec.Struct, frozen=True, tag_field="type", tag="image", forbid_unknown_fields=True
):
    """An image: `data` (base64 of a PNG, JPEG, WebP or GIF file) or an https `url`."""

    data: str | None = None
    url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None


class AudioPart(
    msgspec.Struct, frozen=True, tag_field="type", tag="audio", forbid_unknown_fields=True
):
    """Audio: `data` (base64 of a recorded clip: WAV, WebM/Opus, Ogg, MP3, M4A, FLAC; or
    raw PCM16 with `format: "pcm16"` and `sample_rate`), or the `stream_id` of audio sent
    before with `audio.append` (raw PCM16, 16 kHz unless `sample_rate` says otherwise; or
    `format: "auto"` for the pieces of a recorded file, e.g. MediaRecorder's WebM chunks).
    `format` defaults to "auto" for `data` and "pcm16" for a stream."""

    data: str | None = None
    stream_id: Id | None = None
    format: Literal["auto", "pcm16"] | None = None
    sample_rate: Annotated[int, msgspec.Meta(ge=8000, le=48000)] | None = None


Part = TextPart | ImagePart | AudioPart


class CreateTurn(ClientMessage, tag="turn.create"):
    """Ask for an answer. `client_turn_id` makes a retry idempotent (same turn, answered once).
    A turn needs `text`, `parts`, or both (`text` then comes first)."""

    conversation_id: Id
    text: str = ""
    parts: list[Part] = []
    client_turn_id: Id | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None


class CancelTurn(ClientMessage, tag="turn.cancel"):
    turn_id: Id


class AppendAudio(ClientMessage, tag="audio.append"):
    """Microphone audio (base64), appended to the session's buffer `stream_id`; a
    `turn.create` with an audio part naming the stream takes the buffer."""

    stream_id: Id
    data: str


class ClearAudio(ClientMessage, tag="audio.clear"):
    stream_id: Id


class Feedback(ClientMessage, tag="feedback"):
    """Feedback on one of the user's finished turns (any session of the same user)."""

    turn_id: Id
    kind: FeedbackKind
    comment: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class Ping(ClientMessage, tag="ping"):
    id: Id | None = None


AnyClientMessage = (
    Authenticate | CreateTurn | CancelTurn | AppendAudio | ClearAudio | Feedback | Ping
)
MEDIA_TYPES = frozenset({"turn.create", "audio.append"})  # may exceed the small-message limit
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


class InputTranscript(ServerEvent, tag="input.transcript"):
    """What the turn's audio was heard as (before the answer starts)."""

    turn_id: str
    text: str
    segments: list[TranscriptSegment]
    audio_s: float


class ResponseStarted(ServerEvent, tag="response.started"):
    turn_id: str
    model: str


class ResponseRestarted(ServerEvent, tag="response.restarted"):
    """The answer starts over (its worker failed and another took the turn): discard the
    text shown so far; `response.started` and deltas from seq 0 follow."""

    turn_id: str
    reason: str


class ResponseRetracted(ServerEvent, tag="response.retracted"):
    """The safety check cut the answer: remove every delta shown for this turn and show
    `text` (the canned reply) instead; `response.done` follows with the same `text`."""

    turn_id: str
    reason: str  # the error code: output_cut
    text: str
    shown_chars: int  # characters of this turn's deltas the client had been sent


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


class FeedbackRecorded(ServerEvent, tag="feedback.recorded"):
    turn_id: str
    kind: FeedbackKind


class ErrorEvent(ServerEvent, tag="error"):
    code: str
    message: str
    retryable: bool = False
    retry_after_ms: int | None = None  # rate_limited, overloaded: when a retry may succeed
    turn_id: str | None = None
    client_turn_id: str | None = None  # echoes the `turn.create` this error answers


class Pong(ServerEvent, tag="pong"):
    id: str | None = None


AnyServerEvent = (
    SessionReady
    | TurnAccepted
    | InputTranscript
    | ResponseStarted
    | ResponseRestarted
    | ResponseDelta
    | ResponseRetracted
    | ResponseDone
    | FeedbackRecorded
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
