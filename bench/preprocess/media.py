"""The benchmark's media: spoken clips (espeak-ng) and photos, each a distinct file."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image

from bench.preprocess.common import QUESTIONS, RATE
from harness.media import encode_image, encode_opus, espeak_wav, pcm16, quiet_room
from workers.preprocess.audio_decode import decode_audio


@dataclass(frozen=True)
class Clip:
    """One spoken question: the recorded file a browser would send, and the raw microphone
    samples a streaming client would send instead."""

    text: str
    webm: bytes
    pcm: bytes
    audio_s: float
    speech_s: float


def build_clips(count: int, seed: int = 0) -> list[Clip]:
    """espeak-ng questions padded with quiet room to 2-6 s in all."""
    rng = random.Random(seed)
    clips: list[Clip] = []
    for i in range(count):
        text = QUESTIONS[i % len(QUESTIONS)]
        speech = decode_audio(espeak_wav(text), max_seconds=30, max_bytes=10_000_000)
        speech_s = len(speech) / RATE
        total = rng.uniform(max(2.0, speech_s + 0.6), max(min(6.0, speech_s + 2.0), 2.0))
        lead = rng.uniform(0.3, max(0.3, total - speech_s - 0.3))
        tail = max(0.3, total - speech_s - lead)
        x = np.concatenate([quiet_room(lead, seed=i), speech, quiet_room(tail, seed=1000 + i)])
        clips.append(Clip(text, encode_opus(x, "webm"), pcm16(x), len(x) / RATE, speech_s))
    return clips


def photo_jpeg(width: int, height: int, seed: int, quality: int = 90) -> bytes:
    """Photo-like: smooth colour fields (a low-res random field upscaled) plus sensor noise,
    so the JPEG costs what a camera picture costs to decode (noise alone would not)."""
    rng = np.random.default_rng(seed)
    field_ = rng.integers(30, 226, (max(2, height // 150), max(2, width // 150), 3), np.uint8)
    smooth = Image.fromarray(field_).resize((width, height), Image.Resampling.BICUBIC)
    noisy = np.asarray(smooth, dtype=np.int16) + rng.integers(-10, 11, (height, width, 3))
    return encode_image(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)), "JPEG",
                        quality=quality)  # fmt: skip


def with_comment(jpeg: bytes, tag: int) -> bytes:
    """The same picture with a JPEG comment segment: other bytes, other sha256, same pixels
    (so every item is a cache miss without paying to encode another 12 MP image)."""
    payload = f"bench {tag}".encode()
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def image_set(width: int, height: int, count: int, bases: int = 3) -> list[bytes]:
    base = [photo_jpeg(width, height, seed) for seed in range(bases)]
    return [with_comment(base[i % bases], i) for i in range(count)]
