"""Speech → text with faster-whisper (CTranslate2 int8 on CPU): Whisper tiny.en, or the
multilingual base (`whisper_models`) that also says which language it heard.

Only the speech the VAD found is transcribed: the segments are cut out and joined with a short
silence between them into one buffer, transcribed in one pass, and the timestamps Whisper
returns are mapped back onto the original clip. One pass rather than one per segment because
each pass pays for a whole encoder window: N short segments would cost N encoder passes,
while the joined speech of a chat turn fits one window; each piece also keeps its neighbours
as context. Skipping the silence avoids Whisper's habit of hallucinating text in long
silences. Speech that fits 10 or 20 s is read in that window rather than Whisper's fixed
30 s (`whisper_window`: 233 vs 626 ms of CPU for a spoken question with tiny.en).
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from runtime.whisper_models import tiny_en_path
from runtime.whisper_window import (
    WindowDecode,
    degenerate,
    transcribe_window,
    wider_window,
    window_seconds,
)
from schemas.events import TranscriptSegment  # timed on the original clip
from workers.preprocess.vad import SAMPLE_RATE, SpeechSegment

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

# Silence put between joined segments: enough for Whisper to see a boundary, too short to
# invite hallucinated words.
JOIN_GAP_S = 0.3


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: tuple[TranscriptSegment, ...]
    audio_seconds: float  # the whole clip
    speech_seconds: float  # what was transcribed (the padded speech segments)
    language: str = ""  # ISO 639-1, as heard ("en" for an English-only model)
    # how sure the decode was: the mean log-probability of its tokens, and the probability
    # that the speech is in `language`, detected or given (1.0: English-only model, or a
    # given language on the 30 s path, which does not check it). Low on speech the model cannot
    # read (a language it was not trained on, a voice it mishears); the edge's end of turn does
    # not trust such words (`ws_edge.voice.unfinished.unreadable`)
    logprob: float = 0.0
    language_probability: float = 1.0


@dataclass(frozen=True)
class JoinedPiece:
    joined_start: float  # where the piece starts in the joined buffer, seconds
    orig_start: float  # where it starts in the clip
    duration: float


class _Timeline:
    """Maps times in the joined buffer back onto the clip. Whisper puts a segment boundary
    anywhere in the inserted gaps (often exactly where the previous piece ends): a start there
    maps to the next piece's start, an end to the previous piece's end."""

    def __init__(self, pieces: list[JoinedPiece]) -> None:
        self._pieces = pieces
        self._starts = [p.joined_start for p in pieces]

    def to_clip(self, t: float, *, is_end: bool) -> float:
        k = max(0, bisect.bisect_right(self._starts, t) - 1)
        piece = self._pieces[k]
        offset = t - piece.joined_start
        if is_end:
            if offset <= 0 and k > 0:
                prev = self._pieces[k - 1]
                return prev.orig_start + prev.duration
        elif offset >= piece.duration and k + 1 < len(self._pieces):
            return self._pieces[k + 1].orig_start
        return piece.orig_start + min(max(0.0, offset), piece.duration)


def join_segments(
    audio: np.ndarray, segments: list[SpeechSegment], gap_s: float = JOIN_GAP_S
) -> tuple[np.ndarray, list[JoinedPiece]]:
    """The speech segments of `audio` joined with `gap_s` of silence between them."""
    gap = np.zeros(round(gap_s * SAMPLE_RATE), dtype=np.float32)
    parts: list[np.ndarray] = []
    pieces: list[JoinedPiece] = []
    position = 0
    for seg in segments:
        lo = max(0, round(seg.start_s * SAMPLE_RATE))
        hi = min(len(audio), round(seg.end_s * SAMPLE_RATE))
        if hi <= lo:
            continue
        if parts:
            parts.append(gap)
            position += len(gap)
        parts.append(audio[lo:hi])
        pieces.append(
            JoinedPiece(position / SAMPLE_RATE, lo / SAMPLE_RATE, (hi - lo) / SAMPLE_RATE)
        )
        position += hi - lo
    joined = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return joined, pieces


class WhisperTranscriber:
    """Whisper on CPU (tiny.en unless `model_path` names another faster-whisper folder, such
    as the multilingual base of `whisper_models`), loaded once (`load()` or on first use).
    `language` None: a multilingual model detects it per clip.

    One instance transcribes one clip at a time: a lock serializes `load` and `transcribe`, so
    it is safe to call from `asyncio.to_thread`, but concurrent calls queue rather than run in
    parallel (CTranslate2 already uses `cpu_threads` threads per call)."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        cpu_threads: int | None = None,
        beam_size: int = 1,
        language: str | None = "en",
        short_window: bool = True,
    ) -> None:
        self._model_path = model_path
        self.short_window = short_window  # a window sized to the speech (whisper_window)
        self.cpu_threads = cpu_threads or min(4, os.cpu_count() or 1)
        self.beam_size = beam_size
        self.language = language
        self._model: WhisperModel | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the model now (a few hundred ms) rather than on the first transcription."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> WhisperModel:
        if self._model is None:
            from faster_whisper import WhisperModel

            path = self._model_path or tiny_en_path()
            self._model = WhisperModel(
                str(path),
                device="cpu",
                compute_type="int8",
                cpu_threads=self.cpu_threads,
                num_workers=1,
                local_files_only=True,
            )
        return self._model

    def transcribe(
        self, audio: np.ndarray, segments: list[SpeechSegment], *, language: str | None = None
    ) -> Transcript:
        """Transcribe the speech `segments` of `audio` (float32 mono 16 kHz). No segments gives
        an empty transcript without running the model; the caller decides whether that is an
        error (see `vad.require_speech`)."""
        audio_s = len(audio) / SAMPLE_RATE
        joined, pieces = join_segments(audio, segments)
        speech_s = sum(p.duration for p in pieces)
        if not pieces:
            return Transcript("", (), audio_s, 0.0)
        with self._lock:
            model = self._load_locked()
            wanted = language or self.language  # a hint; an English-only model hears English
            short = self._short_window(model, joined, wanted) if self.short_window else None
            if short is not None and short.segments and not degenerate(short.segments):
                timed = [(s.start_s, s.end_s, s.text) for s in short.segments]
                sure = (short.logprob, short.language_probability)
                return self._transcript(timed, pieces, audio_s, speech_s, short.language, sure=sure)
            raw, info = model.transcribe(
                joined,
                language=wanted if model.model.is_multilingual else "en",
                task="transcribe",
                beam_size=self.beam_size,
                best_of=1,
                temperature=0.0,
                condition_on_previous_text=False,
                vad_filter=False,
                without_timestamps=False,
                word_timestamps=False,
            )
            whisper_segments = list(raw)  # a generator: decoding happens here, under the lock
        timed = [(seg.start, seg.end, seg.text) for seg in whisper_segments]
        tokens = sum(len(seg.tokens) for seg in whisper_segments)
        logprob = (
            sum(seg.avg_logprob * len(seg.tokens) for seg in whisper_segments) / tokens
            if tokens
            else 0.0
        )
        sure = (logprob, info.language_probability if wanted is None else 1.0)
        return self._transcript(timed, pieces, audio_s, speech_s, info.language, sure=sure)

    @staticmethod
    def _short_window(
        model: WhisperModel, joined: np.ndarray, language: str | None
    ) -> WindowDecode | None:
        """The decode in the smallest window that holds the speech; with the English-only
        model an unsure one is read again in the next window and the surer kept (the bar
        was set on tiny.en; on base, whose unsure decodes are most of espeak's foreign
        voices, it cost 2.2x the CPU for 1.3 points of errors). None: the speech needs 30 s."""
        window = window_seconds(len(joined) / SAMPLE_RATE)
        if window is None:
            return None
        decode = transcribe_window(model, joined, window, language)
        second_look = decode.unsure and not model.model.is_multilingual
        wider = wider_window(window) if second_look else None
        if wider is not None:
            again = transcribe_window(model, joined, wider, language)
            decode = max(decode, again, key=lambda d: d.logprob)
        return decode

    @staticmethod
    def _transcript(
        timed: list[tuple[float, float, str]],
        pieces: list[JoinedPiece],
        audio_s: float,
        speech_s: float,
        language: str,
        *,
        sure: tuple[float, float],
    ) -> Transcript:
        """Segments timed on the joined buffer, mapped back onto the clip."""
        timeline = _Timeline(pieces)
        out: list[TranscriptSegment] = []
        for seg_start, seg_end, seg_text in timed:
            text = seg_text.strip()
            if not text:
                continue
            start = timeline.to_clip(seg_start, is_end=False)
            end = max(start, timeline.to_clip(seg_end, is_end=True))
            out.append(TranscriptSegment(round(start, 3), round(end, 3), text))
        text = " ".join(s.text for s in out)
        return Transcript(text, tuple(out), audio_s, speech_s, language, *sure)
