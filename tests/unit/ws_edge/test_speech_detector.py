"""The voice loop's VAD model (real Silero) with the end-pointing rules, on input a
microphone really sends: noise alone makes no turn, clipped (overdriven) speech still does,
and audio sent in odd-sized pieces scores the same as whole."""

from __future__ import annotations

import numpy as np

from harness.media import pcm16, quiet_room, spoken
from ws_edge.voice.loop import FRAME_BYTES, SpeechEnded, SpeechStarted, VadRules, VoiceLoop
from ws_edge.voice.speech_detector import SpeechDetector


def events_of(audio: np.ndarray, chunk_bytes: int | None = None) -> list:
    loop, detector = VoiceLoop(VadRules(early_silence_ms=0)), SpeechDetector()
    pcm = pcm16(audio)
    step = chunk_bytes or len(pcm)
    events = []
    for start in range(0, len(pcm), step):
        frames = loop.append(pcm[start : start + step])
        if frames:
            events += loop.scored(frames, detector.score(frames), assistant_speaking=False)
    return events


def test_noise_alone_makes_no_turn():
    rng = np.random.default_rng(3)
    hiss = (rng.standard_normal(16_000 * 3) * 0.3).clip(-1, 1).astype(np.float32)
    assert events_of(hiss) == []
    assert events_of(quiet_room(3.0)) == []


def test_clipped_speech_is_still_speech():
    speech = spoken("What is the capital of France?")
    overdriven = np.clip(speech * 20, -1, 1).astype(np.float32)
    events = events_of(np.concatenate([quiet_room(0.5), overdriven, quiet_room(1.0)]))
    assert [type(e) for e in events] == [SpeechStarted, SpeechEnded]
    assert events[1].duration_ms > 1000


def test_odd_sized_pieces_score_like_whole_audio():
    audio = np.concatenate([quiet_room(0.5), spoken("Hello there."), quiet_room(1.0)])
    whole = events_of(audio)
    assert [type(e) for e in whole] == [SpeechStarted, SpeechEnded]
    pieces = events_of(audio, chunk_bytes=FRAME_BYTES // 3 + 1)  # never a whole frame at once
    assert pieces == whole
