"""Whisper on a window sized to the speech, not its fixed 30 s (pure helpers + one decode).

Whisper's encoder reads 30 s of features whatever the speech lasts: ~0.45 s of a core for
tiny.en here on a 2 s question, most of a spoken turn's transcription. CTranslate2 also runs
the encoder on a shorter window (it slices the positional embeddings): a 10 s window costs
~60 ms and, for speech that fits it with room to spare, decodes the same words (checked by
`tests/unit/workers/preprocess/test_whisper_window.py` against the 30 s path). Speech too
long for the largest short window, or a decode that looks degenerate (no text, repeated
text), goes the 30 s way.

The smallest window is not always as good: on clear speech it sometimes decodes a worse
guess ("Police at a time or for 10 minutes", piper's joe, 10 s; right at 20 and 30 s). Such a
guess is an unsure one: a decode whose mean token log-probability is below `UNSURE_LOGPROB`
is read again in the next window and the surer of the two kept (on 48 clips: word errors
55 -> 46, as the 20 s window alone, with a second pass for ~1 clip in 5; held out, 39 clips
of other sentences: 35 -> 32, 20 s alone 32, 30 s 31).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

SAMPLE_RATE = 16_000  # Whisper hears 16 kHz mono

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

FRAMES_PER_S = 100  # Whisper's features: one frame every 10 ms
WINDOWS_S = (10, 20)  # the short windows, smallest first
MARGIN_S = 1.5  # speech must leave this much of a window free (Whisper likes a quiet tail)
SECONDS_PER_TIMESTAMP = 0.02
MAX_COMPRESSION = 2.4  # faster-whisper's bar for a repetitive (hallucinated) decode
# every right decode of the tuning clips scored above it (lowest -0.54), half the wrong below
UNSURE_LOGPROB = -0.55


@dataclass(frozen=True, slots=True)
class WindowSegment:
    start_s: float  # in the transcribed buffer
    end_s: float
    text: str


def window_seconds(speech_s: float) -> int | None:
    """The smallest short window that holds `speech_s` with the margin, or None (30 s)."""
    for window in WINDOWS_S:
        if speech_s + MARGIN_S <= window:
            return window
    return None


def wider_window(window_s: int) -> int | None:
    """The next short window after `window_s`, or None (it was the largest)."""
    wider = [w for w in WINDOWS_S if w > window_s]
    return wider[0] if wider else None


@dataclass(frozen=True, slots=True)
class WindowDecode:
    segments: list[WindowSegment]
    language: str  # as decoded: the caller's, or the one detected
    logprob: float  # the mean log-probability of its tokens (higher: surer)
    # how sure the model is that the speech is in `language`, detected or the caller's (1.0:
    # an English-only model, which cannot tell)
    language_probability: float = 1.0

    @property
    def unsure(self) -> bool:
        return self.logprob < UNSURE_LOGPROB


def segments_from_tokens(
    tokens: list[int], *, timestamp_begin: int, eot: int, decode, end_s: float
) -> list[WindowSegment]:
    """Whisper's timestamped output (`<|t0|> text <|t1|><|t1|> text <|t2|>`) as segments;
    text after the last timestamp ends at `end_s`."""
    out: list[WindowSegment] = []
    start: float | None = None
    text: list[int] = []
    for token in tokens:
        if token >= timestamp_begin:
            at = (token - timestamp_begin) * SECONDS_PER_TIMESTAMP
            if start is not None and text:
                out.append(WindowSegment(start, max(start, at), decode(text)))
                text, start = [], None
            else:
                start = at
        elif token < eot:
            text.append(token)
            if start is None:
                start = 0.0 if not out else out[-1].end_s
    if text:
        begin = start if start is not None else 0.0
        out.append(WindowSegment(begin, max(begin, end_s), decode(text)))
    return [s for s in out if s.text.strip()]


def degenerate(segments: list[WindowSegment]) -> bool:
    """No words, or words that compress too well (a loop): let the 30 s path try."""
    text = " ".join(s.text.strip() for s in segments).strip()
    if not text:
        return True
    from faster_whisper.transcribe import get_compression_ratio  # the 30 s path's own measure

    return get_compression_ratio(text) > MAX_COMPRESSION


def transcribe_window(
    model: WhisperModel, audio: np.ndarray, window_s: int, language: str | None
) -> WindowDecode:
    """Greedy timestamped decode of `audio` (float32 16 kHz) padded to `window_s`, the
    language it was decoded as (`language`, or with None and a multilingual model the one
    the model detects from the same encoder pass) and how sure the decode is."""
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    # pad the sound, not the features: silence after the speech, as Whisper was trained on
    # (zero-valued features are not silence; with them a 10 s window misheard "capital of
    # France" as "capital on France", tests/integration/test_http_door.py)
    padded = np.pad(audio, (0, max(0, window_s * SAMPLE_RATE - len(audio))))
    features = pad_or_trim(model.feature_extractor(padded), window_s * FRAMES_PER_S)
    encoded = model.encode(features)
    multilingual = model.model.is_multilingual
    language_probability = 1.0
    if not multilingual:
        language = "en"
    else:  # detected, or the caller's: how sure the model is the speech is in it
        [ranked] = model.model.detect_language(encoded)
        if language is None:
            language, language_probability = ranked[0][0].strip("<|>"), ranked[0][1]
        else:
            language_probability = dict(ranked).get(f"<|{language}|>", 0.0)
    tokenizer = Tokenizer(
        model.hf_tokenizer,
        multilingual,
        task="transcribe" if multilingual else None,
        language=language if multilingual else None,
    )
    prompt = tokenizer.sot_sequence
    [result] = model.model.generate(
        encoded,
        [prompt],
        beam_size=1,
        max_length=min(448, len(prompt) + 20 + int(8 * window_s)),
        suppress_blank=True,
        suppress_tokens=[-1],
        max_initial_timestamp_index=50,
        return_scores=True,  # the sum of log-probabilities over the length (penalty 1)
    )
    segments = segments_from_tokens(
        result.sequences_ids[0],
        timestamp_begin=tokenizer.timestamp_begin,
        eot=tokenizer.eot,
        decode=lambda ids: tokenizer.decode(ids).strip(),
        end_s=len(audio) / SAMPLE_RATE,
    )
    return WindowDecode(segments, language, result.scores[0], language_probability)
