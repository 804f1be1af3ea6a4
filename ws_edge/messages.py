"""The client protocol's messages (WebSocket JSON text frames), both directions.

Client → edge: `session.authenticate`, `session.update`, `turn.create`, `turn.cancel`,
`turn.interrupt`, `audio.append`, `audio.clear`, `feedback`, `response.resume`, `ping`.
Edge → client: `session.ready`, `session.updated`, `turn.accepted`, `input.speech_started`,
`input.speech_stopped`, `input.transcript`, `response.started`, `response.delta`,
`response.restarted`, `response.retracted`, `response.audio`, `response.audio.done`,
`response.truncated`, `response.image.progress`, `response.image`, `response.done`,
`response.resumed`, `feedback.recorded`, `error`, `pong`. Unknown fields are rejected so
typos surface at once.

Pictures: a turn that asks for one ("draw a cat"; `image` sets size, steps, seed) is
answered by the image workers: `response.started`, `response.image.progress` per denoising
step (with a small JPEG `preview` every few steps; the first one carries a `notice` when the
request was clamped), `response.image` (the PNG, base64), then `response.done` whose text is
the caption.

Resume: `response.started`, `response.delta`, `response.done` and `input.transcript` carry
their position in the turn's log, (`epoch`, `offset`): `epoch` counts the answer's attempts
(a worker failover starts a new one), `offset` increases within it. A client that lost its
connection reconnects (to any edge node) and sends `response.resume` with the last position
it has; the edge replays what came after from a short history in Redis, without gap or
duplicate, then streams live. Disconnecting never stops an answer; `turn.cancel` does.

Speech: with `speech` on (session or turn), the answer is also spoken: `response.audio`
frames (PCM s16 LE mono, base64, in order, each tagged with the text it speaks) end with
`response.audio.done`, usually after `response.done`. `turn.interrupt` (or the user talking
over the answer, with `turn_detection`) stops generation and speech; `response.truncated`
says what the conversation's history keeps: the text heard up to `audio_end_ms`.

Media: a `turn.create` carries `parts` (text, images inline as base64 or by https URL, audio
inline or from a stream the client filled with `audio.append`). Binary data travels base64
encoded inside JSON text frames.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from schemas.events import (
    ErrorInfo,
    FeedbackKind,
    FinishReason,
    Timings,
    ToolCall,
    TranscriptSegment,
    Usage,
)

PROTOCOL_VERSION = 1
# `(?!\n)`: Python's `$` also matches before a final newline ("t1\n"); ECMA-262 has no `\Z`
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$(?!\n)"

Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
LanguageCode = Annotated[str, msgspec.Meta(pattern="^[a-z]{2,3}$")]  # ISO 639
Text = Annotated[str, msgspec.Meta(min_length=1)]


class ClientMessage(
    msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=True, omit_defaults=True
):
    """What a client sends. A field left at its default is not sent (`omit_defaults`): a
    client built on a newer protocol keeps working against an older edge, which refuses
    fields it does not know, as long as it uses nothing new."""


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
    # the language spoken (ISO 639-1, e.g. "zh"): skips detection, which short or unusual
    # speech can get wrong (only with TURNSTREAM_ASR_MODEL=multilingual)
    language: LanguageCode | None = None


Part = TextPart | ImagePart | AudioPart


class SpeechOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Speak the answers, with this voice (one the deployment offers: see session.updated)."""

    voice: Annotated[str, msgspec.Meta(max_length=64)] = "joe"


class TurnDetection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Server-side end-of-speech detection on the microphone stream `stream_id` (PCM16 at
    16 kHz sent with `audio.append`): each utterance becomes a turn of `conversation_id`,
    and talking over the assistant's voice interrupts it (barge-in)."""

    conversation_id: Id
    stream_id: Id
    # server_vad: an utterance ends after a fixed silence (TURNSTREAM_VAD_SILENCE_MS);
    # semantic_vad: at each pause an audio turn model judges whether the user finished
    # (a pause mid-thought is waited out; a finished question is answered sooner)
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    # semantic_vad only: high answers sooner (and cuts off more often), low waits longer
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    language: LanguageCode | None = None  # each utterance's audio part `language`
    # the words so far while the user speaks (`input.transcript.interim`, about every second
    # of speech), from the deployment's Whisper model at the edge
    interim_transcripts: bool = False


class SessionUpdate(ClientMessage, tag="session.update"):
    """Change the session's defaults. A field left out is unchanged; `null` turns it off."""

    speech: SpeechOptions | msgspec.UnsetType | None = msgspec.UNSET
    turn_detection: TurnDetection | msgspec.UnsetType | None = msgspec.UNSET
    # the tools every turn of the session offers (a turn's own `tools` replace them; the
    # voice loop's turns use them), and how they may be called; `null` / `[]`: none
    tools: ToolList | msgspec.UnsetType | None = msgspec.UNSET
    tool_choice: ToolChoiceOption | msgspec.UnsetType | None = msgspec.UNSET


class ImageOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How to generate the picture a turn asks for; left out: the deployment's defaults.
    Values past the deployment's limits are clamped (not refused), and the first
    `response.image.progress` says so in its `notice`. `seed`: the same seed, prompt, size
    and steps draw the same picture (default: fixed by the turn)."""

    width: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None
    height: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None
    steps: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None


class HistoryMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A message of the history a stateless client carries with its turn."""

    role: Literal["user", "assistant"]
    content: str


StopString = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class JsonSchema(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """OpenAI's `json_schema`: the answer is an instance of `schema` (a JSON Schema; local
    `$ref`s only, at most TURNSTREAM_MAX_SCHEMA_BYTES as JSON). Always strict: the engine
    never samples a token that breaks it (`strict: false` is refused). `description` is the
    client's note on the format; the model is not shown it."""

    name: Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]{1,64}$(?!\\n)")]
    schema: dict[str, Any]
    description: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    strict: bool | None = None


class TextFormat(
    msgspec.Struct, frozen=True, tag_field="type", tag="text", forbid_unknown_fields=True
):
    """Free text (the default)."""


class JsonObjectFormat(
    msgspec.Struct, frozen=True, tag_field="type", tag="json_object", forbid_unknown_fields=True
):
    """Any JSON object (OpenAI's JSON mode)."""


class JsonSchemaFormat(
    msgspec.Struct, frozen=True, tag_field="type", tag="json_schema", forbid_unknown_fields=True
):
    """An instance of `json_schema.schema` (OpenAI's structured outputs)."""

    json_schema: JsonSchema


ResponseFormatOption = TextFormat | JsonObjectFormat | JsonSchemaFormat


ToolName = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]{1,64}$(?!\\n)")]


class FunctionDefinition(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A function the model may call: its arguments' JSON Schema in `parameters` (checked
    like a response format's schema; left out: any object)."""

    name: ToolName
    description: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(
    msgspec.Struct, frozen=True, tag_field="type", tag="function", forbid_unknown_fields=True
):
    """A tool the client runs itself (OpenAI's shape)."""

    function: FunctionDefinition


class FunctionName(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: ToolName


class NamedToolChoice(
    msgspec.Struct, frozen=True, tag_field="type", tag="function", forbid_unknown_fields=True
):
    """Call this tool (the answer is one call of it)."""

    function: FunctionName


class McpTool(msgspec.Struct, frozen=True, tag_field="type", tag="mcp", forbid_unknown_fields=True):
    """The tools of one of the deployment's MCP servers, run by the server (the tools
    worker), not the client: their calls show as `response.tool_call.*`, then the answer
    continues by itself (`response.done.continued_by` names the turn that carries the
    results). `allowed_tools`: only these of the server's tools (their names on the server);
    left out, every tool the tenant may call. Offered as `<server_label>__<tool>`."""

    server_label: Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9-]{1,24}$(?!\\n)")]
    allowed_tools: Annotated[list[ToolName], msgspec.Meta(max_length=64)] | None = None


ToolList = Annotated[list[FunctionTool | McpTool], msgspec.Meta(max_length=32)]
ToolChoiceOption = Literal["none", "auto", "required"] | NamedToolChoice


class ToolResultInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What running a call of the previous answer returned (`output`: any text, JSON
    usually). The model reads it in this turn's prompt."""

    call_id: Id
    output: Annotated[str, msgspec.Meta(max_length=64 * 1024)]


class CreateTurn(ClientMessage, tag="turn.create"):
    """Ask for an answer. `client_turn_id` makes a retry idempotent (same turn, answered once).
    A turn needs `text`, `parts`, or both (`text` then comes first).

    `history` (left out: the conversation's own, kept by the server) is the history of a
    client that keeps it itself, as OpenAI's chat completions do; `instructions` is the
    client's system message, read after the deployment's. `stop`: the answer ends before the
    first of these strings."""

    conversation_id: Id
    text: str = ""
    parts: list[Part] = []
    client_turn_id: Id | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    stop: Annotated[list[StopString], msgspec.Meta(max_length=4)] = []
    history: list[HistoryMessage] | None = None
    instructions: str = ""
    # speak this answer (`null`: text only); left out: the session's `speech` setting
    speech: SpeechOptions | msgspec.UnsetType | None = msgspec.UNSET
    # a generated picture's size, steps and seed, when the turn asks for one ("draw …")
    image: ImageOptions | None = None
    # the answer's shape, enforced while decoding (JSON mode, a JSON Schema); left out: text
    response_format: ResponseFormatOption | None = None
    # function calling: the tools the model may call (their calls come back as
    # response.tool_call.* and the answer ends with finish_reason tool_calls); how it may
    # (left out: auto); the results of the previous answer's calls, returned with this turn
    tools: ToolList = []
    tool_choice: ToolChoiceOption | None = None
    tool_results: Annotated[list[ToolResultInput], msgspec.Meta(max_length=32)] = []


class CancelTurn(ClientMessage, tag="turn.cancel"):
    turn_id: Id


class InterruptTurn(ClientMessage, tag="turn.interrupt"):
    """Stop an answer the user cut short (generation, speech, queued audio) and keep in the
    history only what they heard: `audio_end_ms` into the answer's audio, as played by the
    client (like OpenAI's truncate). Left out: the edge's estimate from what it sent."""

    turn_id: Id
    audio_end_ms: Annotated[float, msgspec.Meta(ge=0)] | None = None


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


class ResumeResponse(ClientMessage, tag="response.resume"):
    """Pick up an answer's stream after a reconnect (to any edge node), or join it from
    another device of the same user: the frames after (`epoch`, `offset`), the position of
    the last `response.*` frame the client has (both left out: from the start). Name the
    turn, or the conversation (its latest turn). `response.resumed` answers, then the
    frames follow with no gap and no duplicate, then the live stream."""

    turn_id: Id | None = None
    conversation_id: Id | None = None
    epoch: Annotated[int, msgspec.Meta(ge=0)] = 0
    offset: Annotated[int, msgspec.Meta(ge=-1)] = -1


class Ping(ClientMessage, tag="ping"):
    id: Id | None = None


AnyClientMessage = (
    Authenticate
    | SessionUpdate
    | CreateTurn
    | CancelTurn
    | InterruptTurn
    | AppendAudio
    | ClearAudio
    | Feedback
    | ResumeResponse
    | Ping
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


class SessionUpdated(ServerEvent, tag="session.updated"):
    """The session's settings now (after a `session.update`), and the voices offered."""

    speech: SpeechOptions | None
    turn_detection: TurnDetection | None
    voices: list[str]
    tools: list[FunctionTool | McpTool] = []
    tool_choice: ToolChoiceOption | None = None


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
    epoch: int | None = None
    offset: int | None = None
    language: str = ""  # ISO 639-1 as heard (TURNSTREAM_ASR_MODEL=multilingual); "" unknown


class ResponseStarted(ServerEvent, tag="response.started"):
    turn_id: str
    model: str
    epoch: int | None = None  # the answer's position in its turn's log (`response.resume`)
    offset: int | None = None


class ResponseRestarted(ServerEvent, tag="response.restarted"):
    """The answer starts over (its worker failed and another took the turn): discard the
    text shown so far; `response.started` and deltas from seq 0 follow."""

    turn_id: str
    reason: str
    epoch: int | None = None  # the new attempt's epoch: frames of earlier ones are stale


class ResponseRetracted(ServerEvent, tag="response.retracted"):
    """The safety check cut the answer: remove every delta shown for this turn and show
    `text` (the canned reply) instead; `response.done` follows with the same `text`."""

    turn_id: str
    reason: str  # the error code: output_cut
    text: str
    shown_chars: int  # characters of this turn's deltas the client had been sent


class InputSpeechStarted(ServerEvent, tag="input.speech_started"):
    """The user started speaking on the detected stream (`audio_start_ms` into it)."""

    stream_id: str
    audio_start_ms: float


class InputTranscriptInterim(ServerEvent, tag="input.transcript.interim"):
    """The words of the utterance so far, while the user is still speaking (asked for with
    `turn_detection.interim_transcripts`). Each replaces the one before (Whisper may revise
    earlier words as it hears more); the turn's `input.transcript` replaces them all. Best
    effort: a busy edge skips some, and the last may say less than the turn's."""

    stream_id: str
    text: str
    audio_start_ms: float  # where the utterance's speech began in the stream
    audio_end_ms: float  # how far into the stream the words reach
    language: str = ""  # ISO 639-1 as heard ("en" with the English-only model)


class InputSpeechStopped(ServerEvent, tag="input.speech_stopped"):
    """The user stopped speaking: the utterance became `turn_id`, or was `ignored`
    ("backchannel": a short "mm-hm" over the assistant's voice; "command": a short "stop"
    or "wait" that interrupted it)."""

    stream_id: str
    audio_end_ms: float
    turn_id: str | None = None
    ignored: str = ""


class ResponseAudio(ServerEvent, tag="response.audio"):
    """A piece of the spoken answer: `audio` is base64 PCM s16 LE mono at `sample_rate`;
    it says `text` (characters `char_start`.. of the answer). Play in `index` order."""

    turn_id: str
    index: int
    text: str
    char_start: int
    sample_rate: int
    duration_ms: float
    audio: str
    format: str = "pcm16"


class ResponseAudioDone(ServerEvent, tag="response.audio.done"):
    """No more audio for this answer: `reason` completed, interrupted, cancelled, safety
    (the output check cut it), error or tts_unavailable (none came in time)."""

    turn_id: str
    reason: str
    error: ErrorInfo | None = None


class ResponseTruncated(ServerEvent, tag="response.truncated"):
    """After an interrupt: the history keeps `text`, the answer up to `audio_end_ms`."""

    turn_id: str
    audio_end_ms: float
    text: str


class ResponseDelta(ServerEvent, tag="response.delta"):
    turn_id: str
    seq: int
    text: str
    epoch: int | None = None  # joined deltas: the position of the last one joined
    offset: int | None = None


class ResponseToolCallDelta(ServerEvent, tag="response.tool_call.delta"):
    """A piece of a tool call's JSON (`{"name": ..., "arguments": ...}`) as the model
    writes it; `response.tool_call.done` has the whole call."""

    turn_id: str
    index: int
    call_id: str
    delta: str
    epoch: int | None = None
    offset: int | None = None


class ResponseToolCallDone(ServerEvent, tag="response.tool_call.done"):
    """A whole call: run it, and send its `output` back with the next `turn.create`
    (`tool_results`). `call_id` is the same for a regenerated or redelivered answer:
    the key that keeps a side effect from running twice."""

    turn_id: str
    index: int
    call_id: str
    name: str
    arguments: str  # JSON, an instance of the tool's parameters
    epoch: int | None = None
    offset: int | None = None


class ResponseImageProgress(ServerEvent, tag="response.image.progress"):
    """A picture is being generated: `step` of `steps` denoising steps done (0: it starts),
    at `width` x `height`. `notice`: what was clamped of the request (first event only).
    `preview`: base64 JPEG of the picture so far, a few dozen pixels wide (some steps)."""

    turn_id: str
    step: int
    steps: int
    width: int
    height: int
    notice: str = ""
    preview: str | None = None
    preview_format: str | None = None  # "jpeg" when there is a preview


class ResponseImage(ServerEvent, tag="response.image"):
    """A generated picture: `data` is base64 of the `format` (png) file, `sha256` its
    content hash (the blob store keeps it for a while), `seed` draws it again."""

    turn_id: str
    index: int
    format: str
    width: int
    height: int
    sha256: str
    seed: int
    data: str
    epoch: int | None = None
    offset: int | None = None


class ResponseDone(ServerEvent, tag="response.done"):
    turn_id: str
    finish_reason: FinishReason
    text: str
    usage: Usage
    timings: Timings
    model: str
    error: ErrorInfo | None = None
    epoch: int | None = None
    offset: int | None = None
    tool_calls: list[ToolCall] = []  # finish_reason tool_calls: the calls to run
    # the calls are the deployment's (mcp tools): the server runs them and this turn's
    # answer continues in the turn named here, streamed on this connection next
    continued_by: str | None = None


class ResponseResumed(ServerEvent, tag="response.resumed"):
    """The answer to `response.resume`. `status`: `resumed` (the frames after the client's
    position follow, then the live stream), `restarted` (the answer started over since that
    position, on another worker: discard its text; the new attempt follows from its start),
    `expired` (the history no longer reaches back to that position: text is missing, and
    `response.done` carries the whole answer). `epoch`/`offset`: the position the frames
    follow (the client's own, or with `restarted` the new epoch's start, offset -1)."""

    turn_id: str
    conversation_id: str
    status: Literal["resumed", "restarted", "expired"]
    epoch: int
    offset: int
    finished: bool = False  # the answer had ended: the frames up to `response.done` follow


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
    | SessionUpdated
    | TurnAccepted
    | InputSpeechStarted
    | InputSpeechStopped
    | InputTranscriptInterim
    | InputTranscript
    | ResponseAudio
    | ResponseAudioDone
    | ResponseTruncated
    | ResponseStarted
    | ResponseRestarted
    | ResponseDelta
    | ResponseToolCallDelta
    | ResponseToolCallDone
    | ResponseRetracted
    | ResponseImageProgress
    | ResponseImage
    | ResponseDone
    | ResponseResumed
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
