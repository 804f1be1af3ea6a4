"""The segment rules of the VAD, on hand-written probability sequences (no model).

Patterns use 100 ms frames: '#' is speech (0.9), '.' silence (0.05), '~' in between (0.4: under
the 0.5 threshold but above the default 0.35 negative threshold).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workers.preprocess.errors import NoSpeech
from workers.preprocess.vad import (
    FRAME_SECONDS,
    SpeechSegment,
    VadParams,
    require_speech,
    segments_from_probs,
)

LEVEL = {"#": 0.9, ".": 0.05, "~": 0.4}
FRAME = 0.1
BASE = VadParams(min_speech_s=0.2, min_silence_s=0.3, speech_pad_s=0.0, max_segment_s=10.0)


def probs(pattern: str) -> list[float]:
    return [LEVEL[c] for c in pattern]


def run(pattern: str, **overrides: float | None) -> list[tuple[float, float]]:
    params = dataclasses.replace(BASE, **overrides)
    segments = segments_from_probs(probs(pattern), params, frame_s=FRAME)
    return [(s.start_s, s.end_s) for s in segments]


CASES = [
    # (name, pattern, overrides, expected [(start, end)])
    ("silence only", "..........", {}, []),
    ("nothing at all", "", {}, []),
    ("one utterance", "..####....", {}, [(0.2, 0.6)]),
    ("too short to be speech", "..#.......", {}, []),
    ("exactly min speech", "..##......", {}, [(0.2, 0.4)]),
    ("short pause stays inside", "..###..###....", {}, [(0.2, 1.0)]),
    ("long pause splits", "..###...###....", {}, [(0.2, 0.5), (0.8, 1.1)]),
    ("speech until the end", "...#####", {}, [(0.3, 0.8)]),
    ("speech from the start", "####......", {}, [(0.0, 0.4)]),
    ("trailing pause shorter than min silence", "..####..", {}, [(0.2, 0.6)]),
    # hysteresis: between the thresholds neither starts speech nor counts as silence
    ("in-between frames keep speech going", "..###~~~###....", {}, [(0.2, 1.1)]),
    ("in-between frames never start speech", "..~~~~~~..", {}, []),
    (
        "a higher negative threshold makes them silence",
        "..###~~~###....",
        {"neg_threshold": 0.45},
        [(0.2, 0.5), (0.8, 1.1)],
    ),
    # an in-between frame does not end the silence run it falls in
    ("silence run spans an in-between frame", "..###.~.###..", {}, [(0.2, 0.5), (0.8, 1.1)]),
    # padding, clipped to the clip, gaps shorter than two pads split halfway
    ("padding", "....####....", {"speech_pad_s": 0.1}, [(0.3, 0.9)]),
    ("padding clipped at both ends", "##......##", {"speech_pad_s": 0.1}, [(0.0, 0.3), (0.7, 1.0)]),
    (
        "overlapping pads split the gap halfway",
        "..###....###..",
        {"speech_pad_s": 0.3},
        [(0.0, 0.7), (0.7, 1.4)],
    ),
    # max segment length
    (
        "long segment split at its last pause",
        "#####.######",
        {"max_segment_s": 1.0},
        [
            (0.0, 0.5),
            (0.6, 1.2),
        ],
    ),
    (
        "long segment without pause is cut hard",
        "#" * 15,
        {"max_segment_s": 1.0},
        [
            (0.0, 1.0),
            (1.0, 1.5),
        ],
    ),
    (
        "limit reached inside a pause ends there",
        "##########..",
        {"max_segment_s": 1.0},
        [
            (0.0, 1.0),
        ],
    ),
    (
        "pause too short to split at",
        "#####.######",
        {"max_segment_s": 1.0, "min_split_silence_s": 0.2},
        [(0.0, 1.0), (1.0, 1.2)],
    ),
    ("min speech applies after a hard cut", "#" * 11, {"max_segment_s": 1.0}, [(0.0, 1.0)]),
]


@pytest.mark.parametrize(
    ("pattern", "overrides", "expected"),
    [pytest.param(p, o, e, id=name) for name, p, o, e in CASES],
)
def test_segments(pattern: str, overrides: dict, expected: list[tuple[float, float]]) -> None:
    got = run(pattern, **overrides)
    assert len(got) == len(expected), got
    assert [x for pair in got for x in pair] == pytest.approx([x for p in expected for x in p])


def test_default_frames_are_32_ms_and_audio_length_clips_padding() -> None:
    p = np.zeros(40, dtype=np.float32)
    p[10:30] = 1.0
    segments = segments_from_probs(p, VadParams(speech_pad_s=0.2), audio_s=1.2)
    assert FRAME_SECONDS == 0.032
    assert segments == [SpeechSegment(pytest.approx(0.12), pytest.approx(1.16))]
    clipped = segments_from_probs(p, VadParams(speech_pad_s=0.5), audio_s=1.2)
    assert clipped[0].start_s == 0.0 and clipped[0].end_s == pytest.approx(1.2)


def test_segment_is_frozen() -> None:
    segment = SpeechSegment(1.0, 2.5)
    assert segment.duration_s == 1.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        segment.start_s = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"threshold": 0.0},
        {"threshold": 1.0},
        {"threshold": 0.5, "neg_threshold": 0.6},
        {"min_silence_s": -0.1},
        {"max_segment_s": 0.1, "min_speech_s": 0.25},
    ],
)
def test_invalid_params_are_rejected(bad: dict) -> None:
    with pytest.raises(ValueError):
        VadParams(**bad)


def test_default_negative_threshold_is_silero_s() -> None:
    assert VadParams(threshold=0.6).negative_threshold == pytest.approx(0.45)


def test_require_speech() -> None:
    segments = [SpeechSegment(0.0, 1.0)]
    assert require_speech(segments) is segments
    with pytest.raises(NoSpeech):
        require_speech([])
