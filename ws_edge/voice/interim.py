"""Interim transcripts: the words of an utterance while the user is still saying it.

The deployment's own Whisper model (`TURNSTREAM_ASR_MODEL`: tiny.en or the multilingual
base, as the preprocessing worker loads it) reads the utterance so far in the smallest
window that holds it (`runtime.whisper_window`: ~160 ms of a core for the first seconds of
speech with tiny.en, in its 10 s window), so what the client shows while the user talks is
what the turn's transcript will most likely say. A 5 s window would halve that, but read
other words than the 10 s one in 19 of 68 clips (the first 1-3 s of bench/turn_sets'
English sentences, espeak and piper), looping on some ("I would like to book a table"
three times). Whisper cannot decode a tail alone (its encoder reads the whole window), so
each interim reads the utterance from its start; a 30 s utterance costs one 30 s window
per interim.

Best effort: one thread per edge process and a bounded queue (`max_waiting`); a decode that
would wait past it is skipped (the next one, `interim_ms` later, says more), and a session
asks for one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.whisper_models import asr_model_path
from runtime.whisper_window import transcribe_window, window_seconds
from ws_edge.errors import InterimTranscriberUnavailable
from ws_edge.voice.log_mel import SAMPLE_RATE, pcm16_tail
from ws_edge.voice.model_threads import ModelThreads

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

LONGEST_S = 30  # Whisper's own window: longer speech is read by its last 30 s


@dataclass(frozen=True, slots=True)
class Interim:
    text: str
    language: str  # as decoded: the session's, or the one detected ("en" with tiny.en)
    # how sure the read was (`WindowDecode`'s): a second of speech is often too little for
    # the multilingual model to tell its language (English read as Thai, 2026-12-07)
    logprob: float = 0.0
    language_probability: float = 1.0


def window_for(speech_s: float) -> int:
    """The window an utterance of `speech_s` is read in: a short one when it fits, else 30 s."""
    return window_seconds(speech_s) or LONGEST_S


class InterimReader:
    """Blocking: `read` runs Whisper (call it in a thread)."""

    def __init__(self, model_dir: Path, *, threads: int = 1) -> None:
        from faster_whisper import WhisperModel

        self._model: WhisperModel = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads
        )

    def read(self, pcm: bytes, language: str = "") -> Interim:
        """The words of `pcm` (PCM16 16 kHz mono; its last 30 s when longer)."""
        audio = pcm16_tail(pcm, LONGEST_S * SAMPLE_RATE)
        window = window_for(len(audio) / SAMPLE_RATE)
        decode = transcribe_window(self._model, audio, window, language or None)
        text = " ".join(s.text for s in decode.segments).strip()
        return Interim(text, decode.language, decode.logprob, decode.language_probability)


class InterimTranscriber:
    """The edge's interim reader: one model, loaded on first use, a thread, a bounded queue."""

    def __init__(
        self,
        models_dir: Path,
        asr_model: str,
        *,
        threads: int = 1,
        max_waiting: int = 2,
        load: Any = None,
    ) -> None:
        self._threads = ModelThreads(
            load or (lambda: InterimReader(asr_model_path(asr_model, models_dir))),
            InterimTranscriberUnavailable,
            threads=threads,
            max_waiting=max_waiting,
            what="interim transcriber",
        )

    async def read(self, pcm: bytes, language: str = "") -> Interim | None:
        """The words so far, or None when too many reads already wait (skipped). Raises
        `InterimTranscriberUnavailable` when the model cannot run."""
        return await self._threads.run(lambda reader, pcm: reader.read(pcm, language), pcm)

    def warm(self) -> None:
        """Load the model now (in its thread): the first interim comes a second into speech."""
        self._threads.warm()

    def close(self) -> None:
        self._threads.close()
