"""What the session asks its asyncio shell to do: send a frame, publish a turn, cancel one,
record a truncation, drop or detect audio, pass on feedback, resume a turn, look up an API
key, close."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import (
    FeedbackKind,
    SpeechDelivered,
    TurnSubmitted,
    TurnTruncated,
)
from schemas.turn_log import LogPosition
from ws_edge.media import Upload
from ws_edge.messages import (
    ServerEvent,
)


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
class ResolveApiKey:
    """Look the API key up (Redis), then `Session.admit` its principal or `key_refused`."""

    key: str


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
class RecordSpeech:
    """Record that a spoken answer's audio ended here (Kafka), for its speech hops."""

    event: SpeechDelivered


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
class CheckTurn:
    """Ask the audio turn model whether the user finished the utterance `pcm` (so far, with
    the pause), then hand its probability to `Session.turn_verdict`."""

    stream_id: str
    pause_id: int
    pcm: bytes


@dataclass(frozen=True, slots=True)
class CheckCommand:
    """Ask the keyword spotter whether the short speech `pcm` over the assistant's voice is a
    command (in `language`, '' unknown), then hand its verdict to `Session.command_verdict`."""

    stream_id: str
    check_id: int
    pcm: bytes
    language: str


@dataclass(frozen=True, slots=True)
class TranscribeSoFar:
    """Transcribe the utterance so far (`pcm`, in `language`; '' the model's guess) for an
    interim transcript, then hand the words to `Session.interim_heard`."""

    stream_id: str
    utterance: int
    start_ms: float
    end_ms: float
    pcm: bytes
    language: str


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
class ConfirmTurn:
    """A turn started on a guess is confirmed (the user did stop talking): mark it, so the
    deployment's side-effecting tool calls of its answer may run."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class FollowTurn:
    """An answer continues in another turn (the deployment's tools ran its calls): route
    its frames here, record who may resume it, read its log from the start, then
    `follow_loaded` (no ownership check: the session owns the turn it continues)."""

    turn: TurnSubmitted
    owner: str


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
    | RecordSpeech
    | DropAudio
    | DetectSpeech
    | CheckTurn
    | CheckCommand
    | TranscribeSoFar
    | ResumeTurn
    | FollowTurn
    | ConfirmTurn
    | ResolveApiKey
)
