"""Whisper's log-mel features in numpy (pure): what the Smart Turn model reads.

The turn model was trained on the features of Hugging Face's `WhisperFeatureExtractor`
(80 Slaney mel bands, 25 ms Hann windows every 10 ms, log10, clamped 8 decades below the
peak, scaled to about [-1, 1], the waveform normalised to zero mean and unit variance
first). The edge needs only this, not transformers or faster-whisper, so it is written out
here; `tests/unit/ws_edge/test_log_mel.py` checks it against transformers' extractor.
Also what every edge model reads first: the microphone's PCM16 as float samples.
"""

from __future__ import annotations

from functools import cache

import numpy as np

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
N_MELS = 80


def pcm16_tail(pcm: bytes, samples: int) -> np.ndarray:
    """The last `samples` (> 0) samples of PCM16 LE mono `pcm` as float32 in [-1, 1) (an odd
    trailing byte dropped): the window a model reads of the audio so far."""
    whole = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    return whole[-samples:].astype(np.float32) / 32768.0


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    mel = 3.0 * hz / 200.0
    log_region = hz >= 1000.0
    mel[log_region] = 15.0 + np.log(hz[log_region] / 1000.0) * (27.0 / np.log(6.4))
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    hz = 200.0 * mel / 3.0
    log_region = mel >= 15.0
    hz[log_region] = 1000.0 * np.exp(np.log(6.4) * (mel[log_region] - 15.0) / 27.0)
    return hz


@cache
def mel_filters() -> np.ndarray:
    """(N_FFT // 2 + 1, N_MELS) triangular filters, Slaney-normalised (equal area)."""
    fft_freqs = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    mel_edges = np.linspace(
        _hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([SAMPLE_RATE / 2]))[0], N_MELS + 2
    )
    edges = _mel_to_hz(mel_edges)
    widths = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]


@cache
def _window() -> np.ndarray:
    n = np.arange(N_FFT)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)  # periodic Hann


def log_mel(audio: np.ndarray) -> np.ndarray:
    """(N_MELS, len(audio) // HOP) features of float32 mono 16 kHz `audio`."""
    x = audio.astype(np.float64)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    count = 1 + (len(padded) - N_FFT) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:count]
    power = np.abs(np.fft.rfft(frames * _window(), axis=1)) ** 2
    mel = power @ mel_filters()
    spec = np.log10(np.maximum(mel, 1e-10)).T[:, :-1]
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)
