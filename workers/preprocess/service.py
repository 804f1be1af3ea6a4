"""The preprocessing service: one `turn.submitted` in, one `turn.enriched` (or an error) out.

Per turn: wait for earlier turns of the same conversation (order must survive this hop);
skip the work when the turn is already answered or cancelled (inference replays or closes
it); otherwise transcribe its audio (the user sees `input.transcript` at once) and turn its
images into pixel tensors stored by content hash, then publish the enriched turn. Bad media
ends the turn with a precise in-band error; the consumer moves on.

CPU-heavy steps (decoding, VAD, ASR, resizing) run in threads, so the loop keeps consuming,
relaying and heartbeating while one clip is transcribed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from moderation.input_gate import InputGate
from runtime.blobs import BlobStore
from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    ErrorInfo,
    FinishReason,
    ImageInput,
    InputTranscribed,
    MediaKind,
    MediaRef,
    SafetyVerdict,
    Screening,
    SentenceEndJudged,
    TranscriptSegment,
    TurnEnriched,
    TurnSubmitted,
)
from schemas.ids import now_ms
from workers.preprocess.errors import MediaMissing, PreprocessError
from workers.preprocess.sentence_end import NOT_JUDGED, SentenceEnd
from workers.preprocess.text_language import detect as detect_text_language
from workers.preprocess.vision import VisionPipeline
from workers.runtime.keyed_locks import KeyedLocks
from workers.runtime.outcome import OutcomeRecorder, error_outcome
from workers.runtime.relay import RelayPublisher
from workers.runtime.retry import retry_transient

log = logging.getLogger("turnstream.preprocess")


@dataclass(frozen=True, slots=True)
class HeardSpeech:
    text: str
    segments: list[TranscriptSegment]
    audio_s: float
    language: str = ""  # ISO 639-1 as the ASR heard it; "" unknown
    logprob: float = 0.0  # how sure the ASR was (`asr.Transcript`)
    language_probability: float = 1.0


class SpeechRecognizer(Protocol):
    def recognize(self, data: bytes, ref: MediaRef) -> HeardSpeech:
        """Decode, find speech, transcribe (blocking: called in a thread)."""


@dataclass(frozen=True, slots=True)
class PreprocessConfig:
    worker_id: str
    enriched_topic: str


class PreprocessService:
    def __init__(
        self,
        *,
        redis: Redis,
        producer: AIOKafkaProducer,
        relay: RelayPublisher,
        blobs: BlobStore,
        speech: SpeechRecognizer,
        images: VisionPipeline,
        outcomes: OutcomeRecorder,
        names: RedisNames,
        config: PreprocessConfig,
        clock_ms: Callable[[], float],
        gate: InputGate | None = None,
        sentence_end: SentenceEnd | None = None,
    ) -> None:
        self.sentence_end = sentence_end  # judges the voice loop's guesses (None: off)
        self.redis = redis
        self.producer = producer
        self.relay = relay
        self.blobs = blobs
        self.speech = speech
        self.images = images
        self.outcomes = outcomes
        self.names = names
        self.config = config
        self.clock_ms = clock_ms
        self.gate = gate  # None: turns are not screened
        self._conversations = KeyedLocks()

    async def handle(self, event: AnyEvent) -> None:
        if isinstance(event, TurnSubmitted):
            await self.run_turn(event)
        else:
            log.warning("ignoring %s on the submitted topic", type(event).__name__)

    async def run_turn(self, turn: TurnSubmitted) -> None:
        async with self._conversations.hold(turn.conversation_id):
            judge = await self._preprocess(turn)
        # beside the answer, which has started: out of its way; not for a guess withdrawn
        # meanwhile (the user spoke on during its transcription: nobody waits for a verdict)
        if judge is not None and not await self._cancelled(turn):
            await self._judge(turn, judge)

    async def _preprocess(self, turn: TurnSubmitted) -> HeardSpeech | None:
        """Enrich and publish one turn; the transcript the text model is still to judge
        (the edge was told a verdict follows), or None."""
        judge: HeardSpeech | None = None
        started = self.clock_ms()
        if turn.media and not await self._settled(turn):
            try:
                enriched, judge = await self._enrich(turn, started)
            except PreprocessError as err:
                log.info("turn %s: %s (%s)", turn.turn_id, err, err.code)
                await self._fail(turn, ErrorInfo(err.code, str(err), err.retryable))
                return None
        else:
            enriched = TurnEnriched(
                turn_id=turn.turn_id,
                submitted=turn,
                text=turn.text,
                preprocess_ms=round(self.clock_ms() - started, 3),
            )
        if self.gate is not None:
            # the client's own system message and the tool results it returns are read
            # with the turn, one reading: a result reaches the prompt as the user's words
            # do, so an injection hidden in what a tool fetched is stopped like one typed
            results = [r.output for r in turn.tool_results]
            screened = "\n\n".join(t for t in (turn.instructions, *results, enriched.text) if t)
            decision = await self.gate.judge(turn, screened, enriched.images)
            if decision.blocked:
                log.info("turn %s blocked: %s", turn.turn_id, decision.screening.labels)
                error = ErrorInfo(decision.code, decision.reason, False)
                await self._fail(
                    turn, error, FinishReason.SAFETY, decision.screening, decision.verdict
                )
                return None  # its end tells the edge no verdict comes
            enriched = msgspec.structs.replace(
                enriched, screening=decision.screening, verdicts=[decision.verdict]
            )
        # the wall clock as it leaves: the trace's preprocessing hop ends here
        enriched = msgspec.structs.replace(
            enriched,
            text_language=detect_text_language(turn.text) if turn.text else "",
            enriched_at_ms=now_ms(),
        )
        await retry_transient(
            "publishing turns.enriched",
            lambda: self.producer.send_and_wait(
                self.config.enriched_topic, encode(enriched), turn.conversation_id.encode()
            ),
        )
        return judge

    async def fail_turn(self, event: AnyEvent, reason: str) -> None:
        """Last resort when handling failed unexpectedly: the client still gets an answer."""
        if isinstance(event, TurnSubmitted):
            error = ErrorInfo("internal_error", f"preprocessing failed: {reason}"[:500], True)
            await self._fail(event, error)

    async def _settled(self, turn: TurnSubmitted) -> bool:
        """Already answered or cancelled: nothing to compute, inference closes it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(self.names.done_key(turn.turn_id), self.names.decided_key(turn.turn_id))
            pipe.exists(self.names.cancelled_key(turn.turn_id))
            done, cancelled = await pipe.execute()
        return bool(done or cancelled)

    async def _cancelled(self, turn: TurnSubmitted) -> bool:
        return bool(await self.redis.exists(self.names.cancelled_key(turn.turn_id)))

    async def _enrich(
        self, turn: TurnSubmitted, started: float
    ) -> tuple[TurnEnriched, HeardSpeech | None]:
        """The enriched turn, and the transcript still to be judged by the text model."""
        texts = [turn.text] if turn.text else []
        judge: HeardSpeech | None = None
        language = ""
        transcript: list[TranscriptSegment] = []
        images: list[ImageInput] = []
        for ref in turn.media:
            if ref.kind == MediaKind.AUDIO:
                heard = await asyncio.to_thread(self.speech.recognize, await self._load(ref), ref)
                transcript = heard.segments
                language = language or heard.language
                texts.append(heard.text)
                # the edge's end of turn waits on the text model's verdict: it comes after
                # the enriched turn is out (`_judge`), so the answer does not wait for it
                judging = (
                    turn.judge_sentence_end
                    and self.sentence_end is not None
                    and self.sentence_end.judges(heard.text, heard.language)
                )
                if judging:
                    judge = heard
                await self.relay.publish_confirmed(  # before the answer can start
                    self.names.edge_channel(turn.edge_id),
                    InputTranscribed(
                        turn_id=turn.turn_id,
                        text=heard.text,
                        segments=heard.segments,
                        audio_s=heard.audio_s,
                        language=heard.language,
                        logprob=round(heard.logprob, 3),
                        language_probability=round(heard.language_probability, 3),
                        judging=judging,
                    ),
                )
            else:
                images.append(await self.images.prepare(ref, self._load))
        enriched = TurnEnriched(
            turn_id=turn.turn_id,
            submitted=turn,
            text="\n".join(texts),
            images=images,
            transcript=transcript,
            language=language,
            preprocess_ms=round(self.clock_ms() - started, 3),
        )
        return enriched, judge

    async def _judge(self, turn: TurnSubmitted, heard: HeardSpeech) -> None:
        """The text model's verdict on a guess's transcript, to the edge that waits on it
        (a model that fails sends -1: the edge's word lists decide at once)."""
        ends = await self._sentence_end(heard.text, heard.language)
        self.relay.publish(
            self.names.edge_channel(turn.edge_id),
            SentenceEndJudged(turn_id=turn.turn_id, ends_sentence=ends),
        )

    async def _sentence_end(self, text: str, language: str) -> float:
        """The text model's P(the message ends here), or not judged when it is off or fails
        (the edge's word lists still decide: a guess never fails for it)."""
        if self.sentence_end is None:
            return NOT_JUDGED
        try:
            return await asyncio.to_thread(self.sentence_end.probability, text, language)
        except Exception as exc:
            log.warning("the sentence-end model failed: %s", exc)
            return NOT_JUDGED

    async def _load(self, ref: MediaRef) -> bytes:
        data = await retry_transient("loading media", lambda: self.blobs.get(ref.sha256))
        if data is None:
            raise MediaMissing(
                f"the uploaded {ref.kind} expired or was never stored; send it again"
            )
        return data

    async def _fail(
        self,
        turn: TurnSubmitted,
        error: ErrorInfo,
        finish_reason: FinishReason = FinishReason.ERROR,
        screening: Screening | None = None,
        verdict: SafetyVerdict | None = None,
    ) -> None:
        completed = error_outcome(
            turn,
            error,
            worker_id=self.config.worker_id,
            now_ms=self.clock_ms(),
            finish_reason=finish_reason,
            screening=screening,
            verdicts=[verdict] if verdict is not None else None,
        )
        await self.outcomes.record(completed, turn.edge_id)
