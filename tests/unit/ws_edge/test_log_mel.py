"""The edge's Whisper log-mel features equal transformers' `WhisperFeatureExtractor` (what
the turn model was trained on), on speech, noise and silence padding."""

from __future__ import annotations

import numpy as np
import pytest

from harness.media import quiet_room, spoken
from ws_edge.voice.log_mel import N_MELS, log_mel

WINDOW = 8 * 16_000


def reference(audio: np.ndarray) -> np.ndarray:
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(chunk_length=8)
    out = extractor(
        audio,
        sampling_rate=16_000,
        return_tensors="np",
        padding="max_length",
        max_length=WINDOW,
        truncation=True,
        do_normalize=True,
    )
    return out.input_features[0]


def padded(audio: np.ndarray) -> np.ndarray:
    return np.pad(audio, (WINDOW - len(audio), 0)).astype(np.float32)


@pytest.mark.parametrize(
    "audio",
    [
        padded(np.concatenate([quiet_room(0.3), spoken("Is it going to rain today?")])),
        np.random.default_rng(3).normal(0, 0.2, WINDOW).astype(np.float32),
        padded(quiet_room(0.5)),
    ],
    ids=["speech", "noise", "quiet"],
)
def test_features_match_transformers(audio):
    ours = log_mel(audio)
    assert ours.shape == (N_MELS, 800) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference(audio), atol=1e-4)


def test_pcm16_tail_is_the_last_samples_as_floats_without_an_odd_byte():
    from ws_edge.voice.log_mel import pcm16_tail

    pcm = np.array([0, 16384, -32768, 32767], dtype="<i2").tobytes() + b"\x01"
    assert pcm16_tail(pcm, 3).tolist() == [0.5, -1.0, 32767 / 32768]
    assert pcm16_tail(pcm, 10).tolist() == [0.0, 0.5, -1.0, 32767 / 32768]
    assert pcm16_tail(pcm, 3).dtype == np.float32
