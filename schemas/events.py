"""Typed events that travel between services (Kafka values, Redis relay frames).

Data events carry a turn forward; control events steer it (cancel). Every event is a
msgspec struct tagged by `type`; the envelope version lives in the codec (`schemas.codec`).
"""

from __future__ import annotations

import enum

import msgspec


class FinishReason(enum.StrEnum):
    """Why a response ended. `error` closes a turn cleanly instead of leaving it to a timeout."""

    STOP = "stop"  # the model ended its answer
    LENGTH = "length"  # max_tokens reached
    CANCELLED = "cancelled"  # the user (or the system) cancelled the turn
    ERROR = "error"  # the turn failed; an ErrorInfo says why
    SAFETY = "safety"  # refused by the safety checks (input blocked or output cut)
    TOOL_CALLS = "tool_calls"  # the answer is calls of the turn's tools (their results next)


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One chat message of a conversation's history."""

    role: Role
    content: str


class OutputFormat(enum.StrEnum):
    JSON_OBJECT = "json_object"  # any JSON object
    JSON_SCHEMA = "json_schema"  # an instance of the given JSON Schema
    # free text in which tagged pieces must follow their schemas (tool calls: schemas.tools)
    STRUCTURAL_TAG = "structural_tag"


class ResponseFormat(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The answer's shape, enforced while the engine decodes (guided decoding), not checked
    after: a token that would break it is never sampled. `schema` is the JSON Schema as
    JSON text (checked at the edge; text keeps the struct immutable and reaches the engine
    byte for byte)."""

    type: OutputFormat
    schema: str = ""  # json_schema: the schema; structural_tag: the tags and their schemas
    name: str = ""  # the client's name for the schema (OpenAI's `json_schema.name`)


class ToolChoiceMode(enum.StrEnum):
    NONE = "none"  # no call: the tools are not even described
    AUTO = "auto"  # the model decides: text, or a call
    REQUIRED = "required"  # a call to one of the tools
    NAMED = "named"  # a call to the tool `ToolChoice.name`


class ToolSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A function the client (or a server-side tool) can run. `parameters`: the arguments'
    JSON Schema as JSON text (checked at the edge)."""

    name: str
    description: str = ""
    parameters: str = '{"type":"object"}'
    # a deployment's tool (an MCP server's, run by the tools worker): the server's name;
    # "" for a tool the client runs itself
    server: str = ""
    # the server says the tool only reads (MCP's readOnlyHint): a call whose outcome a dead
    # worker left unknown may simply run again; any other call is a side effect, run once
    read_only: bool = False


class ToolChoice(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str = ""  # NAMED only


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A call the answer made. `call_id` is derived from the turn and the call's index, so
    a regenerated or redelivered answer names the same call the same way (the client's
    idempotency key for the side effect). `arguments`: JSON text, an instance of the tool's
    parameters."""

    call_id: str
    name: str
    arguments: str


class ToolRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """How the tools worker ran a deployment's tool call (its trace). `outcome`: `ok`,
    `tool_error` (the tool said it failed), an error code (`tool_timeout`,
    `tool_outcome_unknown`, ...), `cancelled` (not run: the turn was stopped first) or
    `stopped` (cut short while it ran: it may have taken effect).
    `replayed`: the books already held its result (a redelivery, a retry): not run again."""

    idempotency_key: str
    outcome: str
    duration_ms: float = 0.0
    replayed: bool = False
    arguments_bytes: int = 0


class ToolResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What running a call returned, sent back by the client with its next turn (or by the
    tools worker, for a deployment's tool: then `run` says how it ran)."""

    call_id: str
    output: str
    name: str = ""  # the tool's (the edge fills it in from the call when known)
    run: ToolRun | None = None


class DecodingParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Sampling settings of one turn; defaults suit the small bundled model."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0  # on prompt and answer tokens alike (1.0: off)
    # OpenAI's: subtracted from a token's logit per time it is already in the answer (0: off)
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = []  # the answer ends before the first of these strings (not included)
    response_format: ResponseFormat | None = None  # None: free text


class ErrorInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An error as it travels in-band: a stable code, a message for humans, retry advice."""

    code: str
    message: str
    retryable: bool = False


# The code of a turn whose answer the output safety check cut: its `text` is the canned
# reply, and the client must retract what it showed (the edge sends `response.retracted`).
OUTPUT_CUT = "output_cut"


class Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0


class Timings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Latencies of a turn as measured by the worker (milliseconds).

    `queue_ms`: from acceptance at the edge to the start of generation;
    `ttft_ms`: from acceptance at the edge to the first token;
    `itl_ms`: gaps between successive token chunks; `e2e_ms`: acceptance to last token.
    """

    queue_ms: float
    ttft_ms: float | None
    e2e_ms: float
    itl_ms: list[float] = []


class MediaKind(enum.StrEnum):
    IMAGE = "image"
    AUDIO = "audio"


class MediaRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A piece of media a turn carries, by reference: large bytes never ride in Kafka.

    Inline uploads are stored by the edge in the blob store under their `sha256`; an image
    may instead name an https `url` the preprocessor fetches (with SSRF limits). Raw
    microphone audio is `format="pcm16"` with its `sample_rate`; anything else is sniffed.
    """

    kind: MediaKind
    sha256: str = ""
    url: str = ""
    size_bytes: int = 0
    format: str = ""
    sample_rate: int = 0
    language: str = ""  # audio: the client's hint (ISO 639-1); "" lets the ASR detect it


class TranscriptSegment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One stretch of recognised speech, timed on the uploaded clip's own timeline."""

    start_s: float
    end_s: float
    text: str


class ImageInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An image ready for the engine: its pixel tensor is stored under `tensor_key`."""

    sha256: str  # of the original bytes (the encoder cache key)
    tensor_key: str
    width: int
    height: int
    num_patches: int
    # What the image detector saw (preprocessing): None when images are not screened.
    screening: Screening | None = None
    cached: bool = False  # its tensor was already stored (the preprocessing cache): no decode


WIRE_VERSION = 1


class Event(
    msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=True, kw_only=True
):
    """Base of every event: the turn it belongs to, and the envelope version `v`."""

    turn_id: str
    v: int = WIRE_VERSION


class SpeechSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How an answer is spoken: the voice (workers/tts `VOICES`); audio is PCM s16 mono at
    the voice's sample rate."""

    voice: str = "joe"


class Truncation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An answer cut short by the user (barge-in): the history keeps `text` (what was heard,
    `audio_end_ms` into the answer's audio) instead of the whole answer. `withdrawn`: the
    turn itself is void (the voice loop guessed an utterance ended, then the user went on):
    the history keeps neither its question nor its answer."""

    turn_id: str
    text: str
    audio_end_ms: float = 0.0
    withdrawn: bool = False


class ImageOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What the client asked of a generated image (`turn.create.image`); None: the
    deployment's defaults. The image worker clamps values past its limits and says so."""

    width: int | None = None
    height: int | None = None
    steps: int | None = None
    seed: int | None = None


class TurnSubmitted(Event, frozen=True, tag="turn.submitted"):
    """The edge accepted a user turn (Kafka `turns.submitted`, keyed by conversation)."""

    conversation_id: str
    tenant_id: str
    user_id: str
    edge_id: str  # the edge node whose relay channel receives the answer
    text: str
    submitted_at_ms: float  # wall clock at acceptance, epoch milliseconds
    decoding: DecodingParams = DecodingParams()
    client: str = ""
    media: list[MediaRef] = []
    # admission: the tenant's tier (from the server's registry, never the client), the
    # priority engines serve it with (higher first) and whether overload admitted it with
    # less than its tier's due (a smaller pool, fewer max tokens: `pool` names the pool)
    tier: str = ""
    priority: int = 0
    degraded: bool = False
    pool: str = ""  # set when admission fixed the pool (degraded turns); else the router picks
    speech: SpeechSettings | None = None  # speak the answer (workers/tts); None: text only
    # answers of this conversation the user interrupted since its last turn (as far as they
    # were heard) and turns the voice loop withdrew: assembly applies them before it builds
    # this turn's prompt, whatever order topics arrive in
    truncates: list[Truncation] = []
    # the replay run that made this turn (producers/replay); "" for live traffic
    run_id: str = ""
    # the canary arm it is in ("" when no experiment runs; schemas/canary.py), and its system
    # prompt when the arm changes it ("" = the deployment's)
    arm: str = ""
    persona: str = ""
    image: ImageOptions | None = None  # options of a generated image (workers/imagegen)
    # the history a stateless client carries (the HTTP door's chat completions): assembly
    # builds the prompt from it instead of the conversation's stored one; None: the stored
    history: list[Message] | None = None
    # the client's own system message (HTTP door), read after the deployment's persona
    instructions: str = ""
    # the W3C traceparent of the turn's root span at the edge ("" when not traced): the
    # Kafka headers carry each hop's own context; this copy rides inside every later event
    # (as their `submitted`), for hops that lost the headers and for the trace's ClickHouse
    # row (runtime/tracing)
    traceparent: str = ""
    # function calling: the tools this turn offers the model, how it may use them, and the
    # results of the previous answer's calls that this turn returns (schemas.tools)
    tools: list[ToolSpec] = []
    tool_choice: ToolChoice | None = None  # None: auto when there are tools
    tool_results: list[ToolResult] = []
    # how many answers of deployment's tool calls led to this turn since the user's own
    # (0: the user's); the tools worker submits the next one, up to a limit
    tool_round: int = 0
    # the voice loop started it on a guess that the user stopped talking: until the edge
    # confirms it (`RedisNames.confirmed_key`), the deployment's side-effecting tools wait
    speculative: bool = False
    # the voice loop's turns: wall clock when the user's speech ended, as the edge heard the
    # audio arrive (before `submitted_at_ms`: the end-of-turn wait); 0: typed, or a clip
    speech_ended_at_ms: float = 0.0
    # a guess whose end of turn waits on its words (semantic_vad): preprocessing sends the
    # text model's `InputTranscribed.ends_sentence` with its transcript
    judge_sentence_end: bool = False


class SafetyStage(enum.StrEnum):
    INPUT = "input"  # the turn's text, screened before it can reach an engine
    OUTPUT = "output"  # one window of the streamed answer
    AUDIT = "audit"  # the whole exchange, after the fact


class SafetyAction(enum.StrEnum):
    ALLOW = "allow"  # input passes
    BLOCK = "block"  # input refused: the turn never reaches an engine
    RELEASE = "release"  # an output window may be shown
    CUT = "cut"  # an output window is unsafe: the answer stops and is retracted


class Screening(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The input screen's decision, carried with the turn into its trace (`turn.enriched`
    when it passed, `turn.completed` when it was blocked). `error`: a check that failed
    (the others still ran; the turn was judged without it)."""

    action: SafetyAction
    labels: list[str] = []
    elapsed_ms: float = 0.0
    error: str = ""
    scores: dict[str, float] = {}  # an image's detector: the best score per class found


class TurnEnriched(Event, frozen=True, tag="turn.enriched"):
    """A turn after preprocessing (Kafka `turns.enriched`, keyed by conversation): the query
    as the model reads it (typed text and/or the transcript of its audio) and its images.
    `preprocess_ms` is the time spent here, for the per-hop latency budget."""

    submitted: TurnSubmitted
    text: str
    images: list[ImageInput] = []
    transcript: list[TranscriptSegment] = []
    language: str = ""  # the spoken language (ISO 639-1) when the ASR knows it; "" otherwise
    # the typed text's language (ISO 639-1, workers/preprocess/text_language): for analysts
    # only, the prompt and the voice follow `language`; "" when too short or unsure
    text_language: str = ""
    preprocess_ms: float = 0.0
    enriched_at_ms: float = 0.0  # wall clock when preprocessing published it (0: unknown)
    screening: Screening | None = None  # None: not screened (screening off)
    # the input screen's whole verdict, for the events log: it rides here rather than in a
    # record of its own (the sink writes its row; the turn's path reads only `screening`)
    verdicts: list[SafetyVerdict] = []


class PromptContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a turn's prompt was assembled (goes into the trace): history kept and dropped to
    fit the context budget, passages retrieved, whether a user profile was used."""

    history_messages: int
    dropped_messages: int
    prompt_tokens: int  # the assembler's count (the engine's own count is in `Usage`)
    retrieved: list[str] = []
    profile: bool = False
    assembled_at_ms: float = 0.0  # wall clock when the assembled turn was published (0: unknown)


class Route(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a turn was sent and why (goes into the trace): the semantic router's pool,
    intent and reason, whether retrieval ran, then the worker picked in that pool (by
    `strategy`; empty `worker_id` and partition -1: Kafka's key hashing), the prompt
    characters that worker served recently (its prefix cache, approximately), the prompt
    tokens its engine's KV cache held (exactly, from its KV events; 0 when not followed)
    and its score."""

    pool: str
    intent: str = ""
    reason: str = ""
    retrieval: bool = False
    strategy: str = ""
    worker_id: str = ""
    partition: int = -1
    pick_reason: str = ""
    prefix_chars: int = 0
    score: float = 0.0
    cache_hit: bool = False  # the semantic cache answered (no engine)
    cache_similarity: float = 0.0
    prefix_tokens: int = 0


class TurnAssembled(Event, frozen=True, tag="turn.assembled"):
    """A turn ready for an engine (Kafka `inference.<pool>` or `images.requested`, keyed by
    conversation, at the partition of the worker the router chose): the full
    prompt (persona, profile, retrieved context, history, `<image_N>` placeholders, query).
    With `error` set, assembly refused the turn and inference only closes it."""

    submitted: TurnSubmitted
    messages: list[Message]
    context: PromptContext
    assembled_at_ms: float
    images: list[ImageInput] = []
    language: str = ""  # the spoken language (ISO 639-1) when known: the answer's voice
    preprocess_ms: float = 0.0
    error: ErrorInfo | None = None
    screening: Screening | None = None  # the input screen's decision, on to the completion
    route: Route | None = None  # None: assembled before routing existed
    cached_answer: str = ""  # the semantic cache's answer: streamed as is, no engine


class TraceRecorded(Event, frozen=True, tag="trace.recorded"):
    """A turn's trace, joined from its events by the traces job (Kafka `traces`): what the
    ClickHouse sink turns into one `traces` row (`schemas.traces.build_trace`). Without
    `completed`, the turn timed out: it was closed at `closed_at_ms`."""

    submitted: TurnSubmitted
    completed: TurnCompleted | None = None
    closed_at_ms: float = 0.0
    preprocess_ms: float = 0.0
    context: PromptContext | None = None
    screening: Screening | None = None
    route: Route | None = None
    language: str = ""  # the spoken language (ISO 639-1) when the ASR heard one
    text_language: str = ""  # its typed text's, from its `turn.enriched` ("" unknown)
    enriched_at_ms: float = 0.0  # from its `turn.enriched` (0: unknown)
    image_cache_hits: int = 0  # of its images, those the preprocessing cache held


class FeedbackKind(enum.StrEnum):
    """What a user said or did about an answer (the quality layer of monitoring)."""

    THUMBS_UP = "thumbs_up"
    THUMBS_DOWN = "thumbs_down"
    REGENERATE = "regenerate"  # asked for another answer to the same question
    STOP = "stop"  # stopped the answer while it streamed
    COPY_CODE = "copy_code"  # copied a code block out of the answer
    ABANDON = "abandon"  # left without reading the answer


class FeedbackGiven(Event, frozen=True, tag="feedback.given"):
    """A user's feedback on one of their turns (Kafka `feedback`, keyed by conversation)."""

    conversation_id: str
    tenant_id: str
    user_id: str
    kind: FeedbackKind
    given_at_ms: float
    comment: str = ""
    inferred: bool = False  # not given by the user: the edge saw it (an abandoned answer)


class InputTranscribed(Event, frozen=True, tag="input.transcribed"):
    """Relay frame: what the user's audio was heard as, before the answer starts."""

    text: str
    segments: list[TranscriptSegment]
    audio_s: float
    language: str = ""  # ISO 639-1 as heard ("" unknown)
    # how sure the ASR was: the mean log-probability of the words' tokens, and the probability
    # that the speech is in `language`, detected or the client's (1.0: not checked); the
    # voice loop's end of turn does not trust words heard this unsure
    logprob: float = 0.0
    language_probability: float = 1.0
    # a guess of the voice loop: P(the user's message ends after `text`), from a text model
    # (workers.preprocess.sentence_end); -1: not judged (another language, or not a guess)
    ends_sentence: float = -1.0
    # the text model's verdict is on its way in a `SentenceEndJudged` (it runs beside the
    # answer, not before it); `ends_sentence` is then -1 here
    judging: bool = False


class SentenceEndJudged(Event, frozen=True, tag="sentence_end.judged"):
    """Relay frame for the edge alone: the text model's verdict on a guess's transcript,
    sent after the answer started (`InputTranscribed.judging`); never shown to the client."""

    ends_sentence: float  # P(the message ends after the transcript); -1: the model failed


class TurnCancelled(Event, frozen=True, tag="turn.cancelled"):
    """Control: stop generating this turn (Redis broadcast to workers + a marker key)."""

    conversation_id: str
    reason: str = "user"


class TokenChunk(Event, frozen=True, tag="token.chunk"):
    """Relay frame: a piece of the answer, in order (`seq` counts chunks from 0 within one
    attempt; `attempt` tells a redelivered turn's new answer from the old one)."""

    seq: int
    text: str
    emitted_at_ms: float
    attempt: str = ""
    call_index: int = -1  # >= 0: this text is part of the answer's tool call of that index


class TurnStarted(Event, frozen=True, tag="turn.started"):
    """Relay frame: a worker picked the turn up (the client sees it leave the queue).
    `attempt` is new every time a turn starts generating (short: it rides on every chunk)."""

    worker_id: str
    model: str
    attempt: str = ""


class OutputSafety(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How an answer fared under the incremental output check, for its trace: the policy,
    windows sent and released, the window that was cut (-1: none), `unaudited` (optimistic
    stopped waiting for a verdict), the longest hold-back delay and the median verdict
    round trip. `classified`: windows released by a check that ran the category classifier
    without error (when it equals `windows`, that model read the whole answer)."""

    policy: str
    windows: int
    released: int
    cut_window: int = -1
    unaudited: bool = False
    max_hold_ms: float = 0.0
    verdict_p50_ms: float = 0.0
    classified: int = 0


class ImageGeneration(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How an image was generated (workers/imagegen), for the trace and the history: the
    diffusion prompt, the size and steps after clamping (`notice` says what was clamped),
    the seed (deterministic per turn unless the client chose one), steps run (fewer when
    cancelled), the result's blob (`sha256`, empty when none) and the generation time."""

    prompt: str
    width: int
    height: int
    steps: int
    seed: int
    steps_done: int = 0
    guidance: float = 0.0
    notice: str = ""
    sha256: str = ""
    format: str = "png"
    generate_ms: float = 0.0
    screening: Screening | None = None  # the image detector on the result (None: not run)


class TurnCompleted(Event, frozen=True, tag="turn.completed"):
    """Terminal event of a turn: relayed to the edge and recorded in Kafka `turns.completed`."""

    conversation_id: str
    tenant_id: str
    user_id: str
    finish_reason: FinishReason
    text: str
    usage: Usage
    timings: Timings
    model: str
    worker_id: str
    completed_at_ms: float
    error: ErrorInfo | None = None
    # the input screen's decision (blocked turns, and every answered one: the trace gets it
    # from here whatever order the traces job reads its events in)
    screening: Screening | None = None
    output_safety: OutputSafety | None = None  # None: the answer was not checked
    # True when an inference worker ended the turn: it was assembled (the three fields below
    # say how). Older events had them only on `turn.assembled`, so a trace of one with
    # `assembled` and no `context` still waits for that record
    assembled: bool = False
    context: PromptContext | None = None  # how the prompt was built (from its TurnAssembled)
    route: Route | None = None  # the router's decision
    preprocess_ms: float = 0.0
    image: ImageGeneration | None = None  # an image-generation turn (workers/imagegen)
    # the engine options that answered (`EngineProfile.tag`, e.g. "spec=ngram:k4:n2-4,
    # quant=none,tp=1,..."); "" from engines without a profile and from older events
    engine_options: str = ""
    # the verdicts that judged this turn on its way, for the events log (the sink writes a
    # row for each): the streaming check's, one per window, as the inference worker received
    # them; a blocked turn's input verdict. They ride here rather than in records of their own
    verdicts: list[SafetyVerdict] = []
    tool_calls: list[ToolCall] = []  # finish_reason tool_calls: the calls the answer made
    # the calls are the deployment's (MCP) tools: the turn that returns their results, as
    # the tools worker will submit it once they ran (its `tool_results` and submission time
    # still empty). Part of the decided outcome, so every retry asks for the same calls
    continuation: TurnSubmitted | None = None

    @property
    def continued_by(self) -> str:
        return self.continuation.turn_id if self.continuation is not None else ""


class TurnTruncated(Event, frozen=True, tag="turn.truncated"):
    """The user interrupted an answer (Kafka `turns.completed`, keyed by conversation): the
    conversation's history keeps only what was delivered."""

    conversation_id: str
    tenant_id: str
    user_id: str
    truncation: Truncation
    reason: str = "barge_in"  # barge_in (voice activity) or interrupt (the client asked)
    truncated_at_ms: float = 0.0


class SpeechText(Event, frozen=True, tag="speech.text"):
    """A piece of a streaming answer to speak (Kafka `tts.segments`, keyed by turn), cut at
    punctuation every 10-20 characters. `final`: the answer ended; speech ends after it."""

    conversation_id: str
    edge_id: str
    attempt: str
    voice: str
    index: int
    text: str
    char_start: int
    final: bool = False
    finish_reason: FinishReason | None = None  # on the final piece
    sent_at_ms: float = 0.0
    language: str = ""  # the user's spoken language: a voice that speaks it reads the piece


class SpeechAudio(Event, frozen=True, tag="speech.audio"):
    """The audio of one piece (Redis relay to the edge): PCM s16 LE mono. `final`: the last
    audio of the answer (it may be empty); `stopped`: speech ended early (cancel, barge-in,
    safety cut, error) and later pieces were dropped."""

    attempt: str
    index: int
    text: str
    char_start: int
    sample_rate: int
    pcm: bytes = b""
    final: bool = False
    stopped: str = ""
    synth_ms: float = 0.0
    sent_at_ms: float = 0.0
    error: ErrorInfo | None = None


class SpeechDelivered(Event, frozen=True, tag="speech.delivered"):
    """A spoken answer's audio ended at the edge that streamed it (Kafka `turns.completed`,
    keyed by conversation; the events log keeps it): when its first audio went to the
    client, how much was sent and why it ended. The trace is written before the speech
    ends, so the speech hops join the two (ClickHouse view `speech_hops`)."""

    conversation_id: str
    tenant_id: str
    user_id: str
    edge_id: str
    first_audio_at_ms: float  # wall clock when its first audio went out; 0: none did
    ended_at_ms: float
    audio_ms: float = 0.0  # the audio sent, in playback time
    reason: str = "completed"  # as `response.audio.done` said: completed, interrupted, ...


class ImageProgress(Event, frozen=True, tag="image.progress"):
    """Relay frame: an image generation ran `step` of `steps` (0: it starts; the size and
    steps it runs with, and a `notice` when the request was clamped). `preview`: a small
    JPEG of the picture so far, estimated from the latents (empty when none)."""

    attempt: str
    step: int
    steps: int
    width: int
    height: int
    notice: str = ""
    preview: bytes = b""
    sent_at_ms: float = 0.0


class ImageGenerated(Event, frozen=True, tag="image.generated"):
    """Relay frame: a generated image (PNG bytes; also in the blob store under `sha256`).
    Logged, so a client that resumes the turn gets it again."""

    attempt: str
    sha256: str
    width: int
    height: int
    seed: int
    data: bytes
    index: int = 0
    format: str = "png"


class WorkerMetrics(Event, frozen=True, tag="worker.metrics", kw_only=True):
    """An inference worker's state, every TURNSTREAM_METRICS_INTERVAL_MS (Kafka
    `workers.metrics`, keyed by worker): the infrastructure layer of monitoring (ClickHouse
    `worker_metrics`) and the load signal a router can read. Belongs to no turn (`turn_id`
    is empty). Gauges are as of `at_ms`; counters cover the `interval_ms` before it.

    Engine: `running` requests (the decode batch), `waiting` requests, `kv_cache_usage`
    (0..1 of the KV blocks in use), prompt tokens looked up in the prefix cache
    (`prefix_cache_queries`) and found there (`prefix_cache_hits`), `preemptions`,
    `prompt_tokens` prefilled (computed, not served from the cache), `generation_tokens`.
    Worker: `queue_depth` (turns taken from Kafka, not yet handed to the engine: waiting
    for their conversation's earlier turns, pixels or the image budget) and `in_flight`
    (turns held: queued, generating or being recorded)."""

    turn_id: str = ""
    worker_id: str
    pool: str
    model: str
    at_ms: float
    interval_ms: float
    running: int
    waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    queue_depth: int = 0
    in_flight: int = 0


class SafetyVerdict(Event, frozen=True, tag="safety.verdict", kw_only=True):
    """What a safety check decided about a turn, kept in the `events` log. The input
    screen's rides on `turn.enriched` (or a blocked turn's `turn.completed`), the output
    windows' reach the inference worker over Redis and ride on `turn.completed`; only the
    audit's have a record of their own (Kafka `safety.verdicts`, keyed by turn). `labels` are
    the categories that matched (e.g. injection, jailbreak, profanity, blacklisted_user),
    `scores` the classifier's numbers; `text` is what was judged when it was refused (the
    offending window for a cut, capped). `error` names a classifier failure; `action` is
    then the policy's fallback (fail open or closed)."""

    conversation_id: str
    tenant_id: str
    user_id: str
    stage: SafetyStage
    action: SafetyAction
    labels: list[str] = []
    scores: dict[str, float] = {}
    window: int = -1  # the output window's index (input and audit: -1)
    text: str = ""
    checker: str = ""  # the worker that decided
    elapsed_ms: float = 0.0
    at_ms: float
    error: str = ""


class OutputWindow(Event, frozen=True, tag="safety.window", kw_only=True):
    """A window of a streaming answer to classify (queued on the Redis list
    `RedisNames.safety_windows_key`, a work queue, not Kafka: it is worthless after its
    stream's deadline): about 50 tokens plus the tail of the previous window
    (`moderation.windows`), so a phrase split across two windows is seen whole. The safety
    worker publishes its `SafetyVerdict` to the Redis channel `reply_to` (the inference
    worker streaming the answer, which carries it on the turn's `turn.completed`)."""

    conversation_id: str
    tenant_id: str
    user_id: str
    index: int
    text: str
    final: bool = False
    reply_to: str
    sent_at_ms: float


class SafetyAlert(Event, frozen=True, tag="safety.alert", kw_only=True):
    """Something a person should look at (Kafka `safety.alerts`), raised by the audit: a
    severe category (`kind` category, e.g. S4) or too large a share of unsafe turns lately
    (`kind` unsafe_rate). `turn_id` is the turn that raised it."""

    kind: str
    tenant_id: str
    user_id: str
    categories: list[str] = []
    detail: str = ""
    at_ms: float


AnyEvent = (
    TurnSubmitted
    | TurnEnriched
    | TurnAssembled
    | TraceRecorded
    | FeedbackGiven
    | InputTranscribed
    | SentenceEndJudged
    | TurnCancelled
    | TokenChunk
    | TurnStarted
    | TurnCompleted
    | WorkerMetrics
    | SafetyVerdict
    | OutputWindow
    | SafetyAlert
    | TurnTruncated
    | SpeechText
    | SpeechAudio
    | SpeechDelivered
    | ImageProgress
    | ImageGenerated
)
