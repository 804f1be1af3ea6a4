"""decode → VAD → ASR on real synthesized speech, with the real Silero and Whisper models."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from harness.media import (
    RATE,
    count_conversions,
    encode_opus,
    espeak_wav,
    quiet_room,
    wav16,
    words,
)
from workers.preprocess.asr import Transcript, WhisperTranscriber, _Timeline, join_segments
from workers.preprocess.audio_decode import decode_audio
from workers.preprocess.errors import AudioTooLong, AudioUnreadable, NoSpeech, UnsupportedMedia
from workers.preprocess.vad import SileroVad, SpeechSegment, require_speech

LEAD_S, TAIL_S = 1.5, 1.0
LIMITS = {"max_seconds": 60.0, "max_bytes": 20_000_000}


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """ "What is the capital of France?" from espeak-ng, as 16 kHz float."""
    return decode_audio(espeak_wav("What is the capital of France?"), **LIMITS)


@pytest.fixture(scope="module")
def clip(speech: np.ndarray) -> np.ndarray:
    """The question between stretches of faint noise (a quiet room, not digital zero)."""
    room = quiet_room(LEAD_S + TAIL_S)
    lead = round(LEAD_S * RATE)
    return np.concatenate([room[:lead], speech, room[lead:]])


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="module")
def asr() -> WhisperTranscriber:
    transcriber = WhisperTranscriber(cpu_threads=2)
    transcriber.load()
    return transcriber


def transcribe_bytes(data: bytes, vad: SileroVad, asr: WhisperTranscriber) -> Transcript:
    audio = decode_audio(data, **LIMITS)
    return asr.transcribe(audio, require_speech(vad.speech_segments(audio)))


def test_wav_speech_is_found_after_the_silence_and_transcribed(
    clip: np.ndarray, speech: np.ndarray, vad: SileroVad, asr: WhisperTranscriber
) -> None:
    audio = decode_audio(wav16(clip), **LIMITS)
    segments = require_speech(vad.speech_segments(audio))
    speech_end = LEAD_S + len(speech) / RATE
    # padded by 0.2 s; espeak's own leading/trailing quiet makes it start a little later
    assert LEAD_S - 0.25 <= segments[0].start_s <= LEAD_S + 0.4
    assert speech_end - 0.4 <= segments[-1].end_s <= speech_end + 0.3

    transcript = asr.transcribe(audio, segments)
    assert {"capital", "france"} <= set(words(transcript.text)), transcript.text
    assert transcript.audio_seconds == pytest.approx(len(clip) / RATE, abs=1e-3)
    assert transcript.speech_seconds == pytest.approx(sum(s.duration_s for s in segments), abs=1e-3)
    assert transcript.speech_seconds < transcript.audio_seconds - 2.0
    first, last = transcript.segments[0], transcript.segments[-1]
    assert first.start_s >= LEAD_S - 0.25  # on the clip's timeline, not the joined speech's
    assert first.start_s < last.end_s <= transcript.audio_seconds


@pytest.mark.parametrize("container", ["webm", "ogg"])
def test_opus_speech_decodes_to_the_same_length_and_transcribes(
    container: str, clip: np.ndarray, vad: SileroVad, asr: WhisperTranscriber
) -> None:
    data = encode_opus(clip, container)
    assert len(data) < len(clip) * 2 / 4  # really compressed, a quarter of PCM16 or less
    audio = decode_audio(data, **LIMITS)
    assert len(audio) / RATE == pytest.approx(len(clip) / RATE, abs=0.03)
    transcript = transcribe_bytes(data, vad, asr)
    assert {"capital", "france"} <= set(words(transcript.text)), transcript.text
    assert transcript.segments[0].start_s >= LEAD_S - 0.25


def test_silence_has_no_speech(vad: SileroVad, asr: WhisperTranscriber) -> None:
    audio = decode_audio(wav16(quiet_room(3.0, seed=8)), **LIMITS)
    segments = vad.speech_segments(audio)
    assert segments == []
    with pytest.raises(NoSpeech):
        require_speech(segments)
    empty = asr.transcribe(audio, segments)
    assert empty == Transcript("", (), 3.0, 0.0)


def test_vad_state_is_reset_per_clip_and_calls_do_not_interleave(
    clip: np.ndarray, vad: SileroVad
) -> None:
    alone = vad.probabilities(clip)
    assert alone.max() > 0.9 and alone[: int(LEAD_S / 0.032) - 5].max() < 0.1
    results: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: results.append(vad.probabilities(clip))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for probs in results:
        np.testing.assert_array_equal(probs, alone)


def test_truncated_speech_file_is_unreadable(clip: np.ndarray) -> None:
    data = encode_opus(clip, "webm")
    with pytest.raises(AudioUnreadable, match="truncated"):
        decode_audio(data[: len(data) // 2], **LIMITS)


def test_png_is_unsupported() -> None:
    with pytest.raises(UnsupportedMedia, match="PNG"):
        decode_audio(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(100), **LIMITS)


def test_ten_minutes_are_rejected_before_converting(monkeypatch: pytest.MonkeyPatch) -> None:
    converted = count_conversions(monkeypatch)
    ten_minutes = wav16(np.zeros(600 * RATE, np.float32))
    with pytest.raises(AudioTooLong, match="over the 60 s limit"):
        decode_audio(ten_minutes, max_seconds=60, max_bytes=10**9)
    assert converted == []  # refused from the header, not after converting ten minutes
    decode_audio(wav16(np.zeros(RATE, np.float32)), **LIMITS)
    assert converted == [RATE]  # the spy does see a conversion when one happens


def test_over_the_byte_limit(clip: np.ndarray) -> None:
    with pytest.raises(AudioTooLong, match="bytes"):
        decode_audio(wav16(clip), max_seconds=60, max_bytes=10_000)


# --- mapping the joined speech back onto the clip (no model) -----------------------------------


def test_join_segments_and_map_times_back() -> None:
    audio = np.arange(10 * RATE, dtype=np.float32)
    segments = [SpeechSegment(1.0, 2.0), SpeechSegment(5.0, 5.5)]
    joined, pieces = join_segments(audio, segments, gap_s=0.5)
    assert len(joined) == round(2.0 * RATE)  # 1.0 + 0.5 gap + 0.5
    assert joined[0] == RATE and joined[round(1.5 * RATE)] == 5 * RATE
    assert np.all(joined[RATE : round(1.5 * RATE)] == 0)

    timeline = _Timeline(pieces)
    assert timeline.to_clip(0.25, is_end=False) == pytest.approx(1.25)
    assert timeline.to_clip(1.6, is_end=True) == pytest.approx(5.1)
    # boundaries inside (or at the edge of) the gap snap to speech
    assert timeline.to_clip(1.0, is_end=False) == pytest.approx(5.0)
    assert timeline.to_clip(1.2, is_end=False) == pytest.approx(5.0)
    assert timeline.to_clip(1.2, is_end=True) == pytest.approx(2.0)
    assert timeline.to_clip(1.5, is_end=True) == pytest.approx(2.0)
    # past the end clamps to the last piece
    assert timeline.to_clip(9.0, is_end=True) == pytest.approx(5.5)
