"""The image worker: a turn that asks for a picture (Kafka `images.requested`) in, progress
and the image out to the edge (Redis relay), the PNG in the blob store, one `turn.completed`.

Per turn: skip it if already answered (redelivery: the recorded outcome is relayed) or
cancelled; plan the job (prompt, clamped size and steps, seed); check the prompt with the
image rules (the input screen already ran upstream, in preprocessing); then generate, one
image at a time per pipeline, in a thread. Each step sends `image.progress` (with a small
preview every few steps); the image goes to the blob store and to the edge as
`image.generated`; the turn ends with `turn.completed` whose text is the caption and whose
`image` tells the trace the prompt, size, steps, seed and time.

Cancellation (the control channel: cancel, barge-in, a safety cut) sets the turn's flag;
the pipeline's step callback raises at its next step, so the GPU stops within one step.
A worker that stops mid-image does the same and leaves the turn uncommitted (redelivered).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from aiokafka import AIOKafkaProducer
from PIL import Image
from redis.asyncio import Redis
from redis.exceptions import RedisError

from moderation.image_rules import IMAGE_LABELS, IMAGE_REASON, IMAGE_RULES
from moderation.image_screen import ImageScreen
from moderation.language import detect
from moderation.screen import STOP_LABELS, OutputCheck, SafetyConfig
from moderation.verdict import reason_for
from runtime.blobs import BlobStore, sha256_hex
from schemas.channels import RedisNames
from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    ErrorInfo,
    FinishReason,
    ImageGenerated,
    ImageGeneration,
    ImageProgress,
    SafetyAction,
    SpeechText,
    Timings,
    TurnAssembled,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
    TurnSubmitted,
    Usage,
)
from workers.imagegen.errors import GenerationCancelled, ImageGenError
from workers.imagegen.pipeline import ImagePipeline, Latents
from workers.imagegen.preview import png_bytes, preview_jpeg, wants_preview
from workers.imagegen.request import ImageJob, ImageLimits, caption, plan
from workers.runtime.control import control_events
from workers.runtime.outcome import OutcomeRecorder
from workers.runtime.relay import RelayPublisher

log = logging.getLogger("turnstream.imagegen")

BLOCKED = "image_blocked"


@dataclass(frozen=True, slots=True)
class ImageGenConfig:
    worker_id: str
    limits: ImageLimits = dataclasses.field(default_factory=ImageLimits)
    guidance: float = 0.0
    preview_every: int = 1  # steps between previews (0: none)
    preview_side: int = 64
    blob_ttl_s: int = 3600
    speech_topic: str = ""  # Kafka tts.segments: a spoken turn's caption is spoken


def prompt_check() -> OutputCheck:
    """The image rules (answer rules plus what only pictures need) as an output check."""
    return OutputCheck(SafetyConfig(stop_labels=STOP_LABELS | IMAGE_LABELS), rules=IMAGE_RULES)


class ImageGenService:
    def __init__(
        self,
        *,
        pipeline: ImagePipeline,
        redis: Redis,
        producer: AIOKafkaProducer,
        relay: RelayPublisher,
        outcomes: OutcomeRecorder,
        blobs: BlobStore,
        names: RedisNames,
        config: ImageGenConfig,
        clock_ms: Callable[[], float],
        check: OutputCheck | None = None,
        image_screen: ImageScreen | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.redis = redis
        self.producer = producer
        self.relay = relay
        self.outcomes = outcomes
        self.blobs = blobs
        self.names = names
        self.config = config
        self.clock_ms = clock_ms
        self.check = check or prompt_check()
        self.image_screen = image_screen  # None: generated pixels are not looked at
        self._slot = asyncio.Semaphore(1)  # one image at a time per pipeline
        self._cancels: dict[str, threading.Event] = {}  # turns held here → their stop flag
        self.generated = 0
        self.held = 0  # turns taken from Kafka and not finished (the board's in_flight)

    # ---- entry points --------------------------------------------------------------------
    async def handle(self, event: AnyEvent) -> None:
        if not isinstance(event, TurnAssembled):
            log.warning("ignoring %s on the images topic", type(event).__name__)
            return
        self.held += 1
        try:
            await self.run_turn(event)
        finally:
            self.held -= 1

    def request_cancel(self, turn_id: str) -> bool:
        """Stop a turn held here (waiting or generating); False when it is not here."""
        flag = self._cancels.get(turn_id)
        if flag is None:
            return False
        flag.set()
        return True

    async def fail_turn(self, event: AnyEvent, reason: str) -> None:
        """Last resort when handling a turn failed unexpectedly: the client still gets a
        `response.done` instead of waiting forever."""
        if isinstance(event, TurnAssembled):
            error = ErrorInfo("internal_error", f"the turn failed: {reason}"[:500], retryable=True)
            await self._record(self._ended(event, FinishReason.ERROR, error=error), event)

    # ---- one turn ------------------------------------------------------------------------
    async def run_turn(self, assembled: TurnAssembled) -> None:
        turn = assembled.submitted
        if assembled.error is not None:
            ended = self._ended(assembled, FinishReason.ERROR, error=assembled.error)
            await self._record(ended, assembled)
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.names.done_key(turn.turn_id))
            pipe.get(self.names.decided_key(turn.turn_id))
            pipe.exists(self.names.cancelled_key(turn.turn_id))
            recorded, decided, cancelled = await pipe.execute()
        if await self.outcomes.replay(recorded, decided, turn.edge_id) is not None:
            log.info("turn %s already answered; replayed its outcome", turn.turn_id)
            return
        query = assembled.messages[-1].content if assembled.messages else turn.text
        job = plan(query, turn.image, self._limits(), turn.turn_id)
        if cancelled:
            await self._record(self._ended(assembled, FinishReason.CANCELLED, job=job), assembled)
            return
        verdict = self.check.check(job.prompt)
        if verdict.stopped:
            reason = IMAGE_REASON if set(verdict.labels) & IMAGE_LABELS else verdict.reason
            log.info("turn %s: image prompt refused (%s)", turn.turn_id, ",".join(verdict.labels))
            error = ErrorInfo(BLOCKED, reason or IMAGE_REASON)
            ended = self._ended(assembled, FinishReason.SAFETY, error=error, job=job, text=reason)
            await self._record(ended, assembled)
            return
        flag = self._cancels.setdefault(turn.turn_id, threading.Event())
        try:
            await self._generate(assembled, job, flag)
        finally:
            self._cancels.pop(turn.turn_id, None)

    async def _generate(self, assembled: TurnAssembled, job: ImageJob, flag: threading.Event):
        turn = assembled.submitted
        channel = self.names.edge_channel(turn.edge_id)
        attempt = secrets.token_hex(4)
        started_ms = self.clock_ms()
        self.relay.publish(
            channel,
            TurnStarted(
                turn_id=turn.turn_id,
                worker_id=self.config.worker_id,
                model=self.pipeline.model_name,
                attempt=attempt,
            ),
        )
        self._progress(channel, turn.turn_id, attempt, job, 0, notice=job.notice)
        loop = asyncio.get_running_loop()
        steps_done = 0

        def on_step(step: int, latents: Latents) -> None:  # in the pipeline's thread
            nonlocal steps_done
            if flag.is_set():
                raise GenerationCancelled(f"stopped after step {steps_done}")
            steps_done = step
            preview = b""
            if wants_preview(step, job.steps, self.config.preview_every):
                preview = preview_jpeg(latents(), self.config.preview_side)
            loop.call_soon_threadsafe(
                functools.partial(
                    self._progress, channel, turn.turn_id, attempt, job, step, preview=preview
                )
            )

        gen_started = self.clock_ms()
        async with self._slot:
            try:
                if flag.is_set():
                    raise GenerationCancelled("cancelled while waiting for the pipeline")
                image = await asyncio.to_thread(
                    self.pipeline.generate, job, guidance=self.config.guidance, on_step=on_step
                )
            except asyncio.CancelledError:
                flag.set()  # the worker is stopping: the thread stops at its next step
                raise
            except GenerationCancelled:
                ended = self._ended(
                    assembled,
                    FinishReason.CANCELLED,
                    job=job,
                    started_ms=started_ms,
                    generation=self._generation(job, steps_done, gen_started),
                )
                await self._record(ended, assembled, attempt)
                return
            except ImageGenError as err:
                log.warning("turn %s: %s", turn.turn_id, err)
                error = ErrorInfo(err.code, str(err), err.retryable)
                ended = self._ended(
                    assembled, FinishReason.ERROR, error=error, job=job, started_ms=started_ms
                )
                await self._record(ended, assembled, attempt)
                return
        generate_ms = self.clock_ms() - gen_started
        generation = msgspec.structs.replace(
            self._generation(job, steps_done, gen_started), generate_ms=round(generate_ms, 3)
        )
        generation = await self._screened(image, generation)
        if generation.screening is not None and generation.screening.action == SafetyAction.BLOCK:
            await self._withhold(assembled, job, generation, started_ms, attempt)
            return
        png = await asyncio.to_thread(png_bytes, image)
        digest = sha256_hex(png)
        await self.blobs.put(digest, png, ttl_s=self.config.blob_ttl_s)
        self.relay.publish(
            channel,
            ImageGenerated(
                turn_id=turn.turn_id,
                attempt=attempt,
                sha256=digest,
                width=image.width,
                height=image.height,
                seed=job.seed,
                data=png,
            ),
        )
        self.generated += 1
        generation = msgspec.structs.replace(generation, sha256=digest)
        ended = self._ended(
            assembled,
            FinishReason.STOP,
            job=job,
            text=caption(job),
            started_ms=started_ms,
            generation=generation,
        )
        await self._record(ended, assembled, attempt)

    async def _screened(self, image: Image.Image, generation: ImageGeneration) -> ImageGeneration:
        """The generation with what the image detector saw in the result (when it runs)."""
        if self.image_screen is None:
            return generation
        screening = await asyncio.to_thread(self.image_screen.screen, image)
        return msgspec.structs.replace(generation, screening=screening)

    async def _withhold(
        self,
        assembled: TurnAssembled,
        job: ImageJob,
        generation: ImageGeneration,
        started_ms: float,
        attempt: str,
    ) -> None:
        """A generated image the detector stopped: never stored or shown; the turn ends."""
        labels = tuple(generation.screening.labels) if generation.screening else ()
        reason = reason_for(labels, detect(job.prompt))
        log.info("turn %s: generated image withheld (%s)", assembled.turn_id, ",".join(labels))
        ended = self._ended(
            assembled,
            FinishReason.SAFETY,
            error=ErrorInfo(BLOCKED, reason),
            job=job,
            text=reason,
            started_ms=started_ms,
            generation=generation,
        )
        await self._record(ended, assembled, attempt)

    def _progress(
        self,
        channel: str,
        turn_id: str,
        attempt: str,
        job: ImageJob,
        step: int,
        *,
        notice: str = "",
        preview: bytes = b"",
    ) -> None:
        self.relay.publish(
            channel,
            ImageProgress(
                turn_id=turn_id,
                attempt=attempt,
                step=step,
                steps=job.steps,
                width=job.width,
                height=job.height,
                notice=notice,
                preview=preview,
                sent_at_ms=self.clock_ms(),
            ),
        )

    def _limits(self) -> ImageLimits:
        limits = self.config.limits
        multiple = max(limits.multiple, self.pipeline.scale_factor)
        return dataclasses.replace(limits, multiple=multiple)

    def _generation(self, job: ImageJob, steps_done: int, started_ms: float) -> ImageGeneration:
        return ImageGeneration(
            prompt=job.prompt,
            width=job.width,
            height=job.height,
            steps=job.steps,
            seed=job.seed,
            steps_done=steps_done,
            guidance=self.config.guidance,
            notice=job.notice,
            generate_ms=round(self.clock_ms() - started_ms, 3),
        )

    def _ended(
        self,
        assembled: TurnAssembled,
        finish: FinishReason,
        *,
        error: ErrorInfo | None = None,
        job: ImageJob | None = None,
        text: str = "",
        started_ms: float | None = None,
        generation: ImageGeneration | None = None,
    ) -> TurnCompleted:
        """The turn's terminal event: an error outcome's shape, with this worker's image
        facts, timings from the start of generation, and how the turn was assembled (the
        trace reads that here)."""
        turn = assembled.submitted
        now = self.clock_ms()
        if generation is None and job is not None:
            generation = self._generation(job, 0, now)
        started = started_ms if started_ms is not None else now
        return TurnCompleted(
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            tenant_id=turn.tenant_id,
            user_id=turn.user_id,
            finish_reason=finish,
            text=text,
            usage=Usage(0, 0),
            timings=Timings(
                queue_ms=round(started - turn.submitted_at_ms, 3),
                ttft_ms=None,
                e2e_ms=round(now - turn.submitted_at_ms, 3),
            ),
            model=self.pipeline.model_name,
            worker_id=self.config.worker_id,
            completed_at_ms=now,
            error=error,
            screening=assembled.screening,
            assembled=True,
            context=assembled.context,
            route=assembled.route,
            preprocess_ms=assembled.preprocess_ms,
            image=generation,
        )

    async def _record(
        self, completed: TurnCompleted, assembled: TurnAssembled, attempt: str = ""
    ) -> None:
        """Durable first (Kafka, the done marker), then the client hears of it; a spoken
        turn's caption goes to the TTS worker (the edge waits for its speech to end)."""
        turn = assembled.submitted
        await self.outcomes.record(completed, turn.edge_id)
        if turn.speech is not None and self.config.speech_topic:
            await self._speak(turn, completed, attempt)

    async def _speak(self, turn: TurnSubmitted, completed: TurnCompleted, attempt: str) -> None:
        assert turn.speech is not None
        piece = SpeechText(
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            edge_id=turn.edge_id,
            attempt=attempt,
            voice=turn.speech.voice,
            index=0,
            text=completed.text,
            char_start=0,
            final=True,
            finish_reason=completed.finish_reason,
            sent_at_ms=self.clock_ms(),
        )
        await self.producer.send(self.config.speech_topic, encode(piece), key=turn.turn_id.encode())

    # ---- the control channel -------------------------------------------------------------
    async def listen_for_cancels(self) -> None:
        """Follow the control channel; after a resubscribe, re-check the cancel markers of
        the turns held here (cancels sent meanwhile were not heard)."""
        first = True
        while True:
            try:
                recheck = None if first else self._recheck_cancels
                channel = self.names.control_channel()
                async for event in control_events(self.redis, channel, recheck):
                    if isinstance(event, TurnCancelled):
                        self.request_cancel(event.turn_id)
            except RedisError:
                log.warning("control channel lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)
            first = False

    async def _recheck_cancels(self) -> None:
        """After a resubscribe: cancels published while the channel was down."""
        for turn_id in list(self._cancels):
            if await self.redis.exists(self.names.cancelled_key(turn_id)):
                self.request_cancel(turn_id)
