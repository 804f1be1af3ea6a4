"""Audio of a turn → what was said: decode (any browser format or raw PCM16) → VAD → ASR.

Blocking and CPU-bound: the service calls `recognize` in a thread. The Whisper model loads on
first use (or `warm()` at startup, so the first spoken turn does not pay ~0.5 s). One
pipeline serves one call at a time (its models hold locks); `SpeechPool` runs several side
by side: on 2 cores, two pipelines with one ASR thread each transcribe ~48% more audio per
second than one pipeline with two threads (`python -m bench.preprocess`).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from pathlib import Path

from schemas.events import MediaRef
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.audio_decode import decode_audio, decode_pcm16
from workers.preprocess.errors import NoSpeech
from workers.preprocess.service import HeardSpeech
from workers.preprocess.vad import SileroVad, require_speech


@dataclass
class SpeechPipeline:
    vad: SileroVad
    asr: WhisperTranscriber
    max_seconds: float
    max_bytes: int

    @classmethod
    def load(
        cls,
        *,
        max_seconds: float,
        max_bytes: int,
        asr_threads: int,
        short_window: bool = True,
        model_path: Path | None = None,
    ) -> SpeechPipeline:
        """`model_path` None: tiny.en (English); a multilingual folder detects the language."""
        asr = WhisperTranscriber(
            model_path,
            cpu_threads=asr_threads,
            short_window=short_window,
            language="en" if model_path is None else None,
        )
        return cls(SileroVad(), asr, max_seconds, max_bytes)

    def warm(self) -> None:
        self.asr.load()

    def recognize(self, data: bytes, ref: MediaRef) -> HeardSpeech:
        if ref.format == "pcm16":
            audio = decode_pcm16(
                data, ref.sample_rate, max_seconds=self.max_seconds, max_bytes=self.max_bytes
            )
        else:
            audio = decode_audio(data, max_seconds=self.max_seconds, max_bytes=self.max_bytes)
        segments = require_speech(self.vad.speech_segments(audio))
        transcript = self.asr.transcribe(audio, segments, language=ref.language or None)
        if not transcript.text.strip():
            raise NoSpeech("speech was detected but no words were recognised")
        return HeardSpeech(
            text=transcript.text,
            segments=list(transcript.segments),
            audio_s=transcript.audio_seconds,
            language=transcript.language,
            logprob=transcript.logprob,
            language_probability=transcript.language_probability,
        )


class SpeechPool:
    """Independent pipelines; a call takes a free one (waiting when all are busy)."""

    def __init__(self, pipelines: list[SpeechPipeline]) -> None:
        self.size = len(pipelines)
        self._all = pipelines
        self._free: queue.Queue[SpeechPipeline] = queue.Queue()
        for pipeline in pipelines:
            self._free.put(pipeline)

    @classmethod
    def load(
        cls,
        workers: int,
        *,
        max_seconds: float,
        max_bytes: int,
        asr_threads: int,
        short_window: bool = True,
        model_path: Path | None = None,
    ) -> SpeechPool:
        return cls(
            [
                SpeechPipeline.load(
                    max_seconds=max_seconds,
                    max_bytes=max_bytes,
                    asr_threads=asr_threads,
                    short_window=short_window,
                    model_path=model_path,
                )
                for _ in range(max(1, workers))
            ]
        )

    def warm(self) -> None:
        for pipeline in self._all:
            pipeline.warm()

    def recognize(self, data: bytes, ref: MediaRef) -> HeardSpeech:
        pipeline = self._free.get()
        try:
            return pipeline.recognize(data, ref)
        finally:
            self._free.put(pipeline)
