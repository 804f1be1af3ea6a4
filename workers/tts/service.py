"""The TTS worker: pieces of answers in (Kafka `tts.segments`), audio out to the edge that
streams the answer (Redis relay), in order, each frame tagged with the text it speaks.

Pieces are synthesized a few at once in threads (piper holds the GIL only in Python glue), so
the next clause is ready before the current one has played; `SpeechSequencer` puts the audio
back in order. Cancels (the control channel: cancel, barge-in, safety cut) skip every piece of
the turn not yet synthesized and end its speech at once with a `stopped` frame.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.channels import RedisNames
from schemas.events import (
    OUTPUT_CUT,
    AnyEvent,
    ErrorInfo,
    FinishReason,
    SpeechAudio,
    SpeechText,
    TurnCancelled,
)
from workers.runtime.control import control_events
from workers.runtime.relay import RelayPublisher
from workers.tts.errors import SpeechError
from workers.tts.sequencer import Admission, Outgoing, SpeechSequencer
from workers.tts.voices import Audio, VoiceBook

log = logging.getLogger("turnstream.tts")

NORMAL_ENDS = frozenset({FinishReason.STOP, FinishReason.LENGTH})
# a control-channel cancel's reason, as the client reads it in response.audio.done
STOP_REASONS = {"user": str(FinishReason.CANCELLED), OUTPUT_CUT: str(FinishReason.SAFETY)}


@dataclass(frozen=True, slots=True)
class TtsConfig:
    worker_id: str
    concurrency: int = 2  # pieces synthesized at once
    default_sample_rate: int = 22050  # of `stopped` frames that carry no audio


class TtsService:
    def __init__(
        self,
        *,
        redis: Redis,
        relay: RelayPublisher,
        voices: VoiceBook,
        names: RedisNames,
        config: TtsConfig,
        clock_ms: Callable[[], float],
    ) -> None:
        self.redis = redis
        self.relay = relay
        self.voices = voices
        self.names = names
        self.config = config
        self.clock_ms = clock_ms
        self.sequencer = SpeechSequencer()
        self._slots = asyncio.Semaphore(config.concurrency)
        self.spoken = 0  # pieces synthesized
        self.skipped = 0  # pieces dropped because their turn was cancelled

    async def handle(self, event: AnyEvent) -> None:
        if not isinstance(event, SpeechText):
            log.warning("ignoring %s on the speech topic", type(event).__name__)
            return
        admission = self.sequencer.admit(event)
        if admission == Admission.DUPLICATE:
            return
        if admission == Admission.SKIP:
            self.skipped += 1
            reason = self.sequencer.cancelled(event.turn_id)
            self._send(self.sequencer.done(event, self._stopped(event, reason)))
            return
        audio: SpeechAudio | None = await self._speak(event)
        if self.sequencer.cancelled(event.turn_id):
            audio = None  # cancelled while it was synthesized: its stop frame went already
        self._send(self.sequencer.done(event, audio))

    def cancel(self, turn_id: str, reason: str) -> None:
        """Stop a turn's speech (from the control channel)."""
        rate = self.config.default_sample_rate
        reason = STOP_REASONS.get(reason, reason)
        self._send(self.sequencer.cancel(turn_id, reason, sample_rate=rate))

    async def fail_piece(self, event: AnyEvent, reason: str) -> None:
        """Last resort when handling a piece failed: the edge must not wait for it."""
        if isinstance(event, SpeechText):
            error = ErrorInfo("tts_failed", reason[:500], retryable=False)
            self._send(self.sequencer.done(event, self._stopped(event, "error", error)))

    async def _speak(self, piece: SpeechText) -> SpeechAudio:
        started = self.clock_ms()
        error: ErrorInfo | None = None
        try:
            voice = self.voices.speaking(piece.voice, piece.language)
            rate = voice.sample_rate
            if piece.text.strip():
                async with self._slots:
                    if self.sequencer.cancelled(piece.turn_id):
                        audio = Audio(b"", rate)
                    else:
                        audio = await asyncio.to_thread(voice.synthesize, piece.text)
                        self.spoken += 1
            else:
                audio = Audio(b"", rate)
        except SpeechError as err:
            log.warning("turn %s piece %d: %s", piece.turn_id, piece.index, err)
            error = ErrorInfo(err.code, str(err), err.retryable)
            audio = Audio(b"", self.config.default_sample_rate)
        stopped = ""
        if piece.final and piece.finish_reason not in NORMAL_ENDS:
            stopped = str(piece.finish_reason or "error")
        if error is not None and not error.retryable:  # e.g. an unknown voice: give up
            stopped = "error"
        return SpeechAudio(
            turn_id=piece.turn_id,
            attempt=piece.attempt,
            index=piece.index,
            text=piece.text,
            char_start=piece.char_start,
            sample_rate=audio.sample_rate,
            pcm=audio.pcm,
            final=piece.final or bool(stopped),
            stopped=stopped,
            synth_ms=round(self.clock_ms() - started, 3),
            sent_at_ms=self.clock_ms(),
            error=error,
        )

    def _stopped(
        self, piece: SpeechText, reason: str, error: ErrorInfo | None = None
    ) -> SpeechAudio | None:
        """The frame that ends a cancelled turn's speech (only its final piece yields one)."""
        if not piece.final and error is None:
            return None
        return SpeechAudio(
            turn_id=piece.turn_id,
            attempt=piece.attempt,
            index=piece.index,
            text="",
            char_start=piece.char_start,
            sample_rate=self.config.default_sample_rate,
            final=True,
            stopped=reason,
            sent_at_ms=self.clock_ms(),
            error=error,
        )

    def _send(self, frames: list[Outgoing]) -> None:
        for frame in frames:
            self.relay.publish(self.names.edge_channel(frame.edge_id), frame.audio)

    async def listen_for_cancels(self) -> None:
        """Follow the control channel; survive Redis restarts by resubscribing."""
        while True:
            try:
                async for event in control_events(self.redis, self.names.control_channel()):
                    if isinstance(event, TurnCancelled):
                        self.cancel(event.turn_id, event.reason)
            except RedisError:
                log.warning("control channel lost; resubscribing", exc_info=True)
                await asyncio.sleep(0.5)
