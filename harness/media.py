"""Real media made by the tests: speech from espeak-ng, Opus/WebM from PyAV, images from
Pillow and hand-built PNG headers for the size attacks."""

from __future__ import annotations

import io
import re
import struct
import subprocess
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import av
import matplotlib
import numpy as np
import pytest
from PIL import Image

from workers.preprocess import audio_decode

if TYPE_CHECKING:
    from workers.tts.voices import Voice

RATE = 16_000


def words(text: str) -> list[str]:
    """Lower-case words without punctuation (to compare transcripts)."""
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


def espeak_wav(text: str) -> bytes:
    """espeak-ng's WAV (22050 Hz mono s16; its header carries placeholder sizes)."""
    return subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True).stdout


def spoken(text: str, *, trim: bool = False) -> np.ndarray:
    """espeak-ng saying `text`, as float32 mono 16 kHz; `trim` cuts the silence espeak puts
    around the words (to control the pauses between clips exactly)."""
    x = audio_decode.decode_audio(espeak_wav(text), max_seconds=30, max_bytes=10_000_000)
    return _without_silence(x) if trim else x


def voiced(voice: Voice, text: str, *, trim: bool = False) -> np.ndarray:
    """A TTS voice (piper's joe, espeak-ng in any language) saying `text`, as float32 mono
    16 kHz: speech in the languages and voices `spoken` (English espeak-ng) does not cover.
    `trim` as for `spoken`."""
    audio = voice.synthesize(text)
    x = audio_decode.decode_pcm16(
        audio.pcm, audio.sample_rate, max_seconds=60, max_bytes=100_000_000
    )
    return _without_silence(x) if trim else x


def _without_silence(x: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(x) > 0.01)
    return x[loud[0] : loud[-1] + 1] if len(loud) else x


def quiet_room(seconds: float, seed: int = 7) -> np.ndarray:
    """Faint noise, not digital zero: what a microphone records between words."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * RATE)) * 1e-3).astype(np.float32)


def wav16(x: np.ndarray, rate: int = RATE) -> bytes:
    """A plain PCM16 mono WAV file of float samples."""
    raw = pcm16(x)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(raw))
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(raw))
        + raw
    )


def pcm16(x: np.ndarray) -> bytes:
    """Raw little-endian PCM16 (what a microphone stream sends)."""
    return np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def encode_opus(x: np.ndarray, container: str) -> bytes:
    """Opus in `webm` or `ogg`, at the bit rate browsers use for voice."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream("libopus", rate=RATE, layout="mono")
        stream.bit_rate = 32_000
        frame = av.AudioFrame.from_ndarray(x.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = RATE
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def encode_image(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


def noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bilevel_png(width: int, height: int, idat: bytes | None = None) -> bytes:
    """A 1-bit grayscale PNG. With `idat=None` it is a real, valid all-black image (zeros
    compress ~1000:1, so even 50 MP is a few KB); otherwise the given IDAT is used as is."""
    if idat is None:
        row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed pixels
        idat = zlib.compress(row * height, 9)
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", idat)
        + png_chunk(b"IEND", b"")
    )


def count_conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on the audio decoder's conversion to mono, which every decode path (native WAV,
    FFmpeg, raw PCM) goes through: the list receives the frame count of each call, so an
    empty list proves a refusal came before any audio was converted."""
    calls: list[int] = []
    original = audio_decode._downmix

    def counting(samples: np.ndarray) -> np.ndarray:
        calls.append(len(samples))
        return original(samples)

    monkeypatch.setattr(audio_decode, "_downmix", counting)
    return calls


# A real photo with a face, public domain (Grace Hopper, US Navy), from matplotlib's sample
# data: what the image detector's tests look at (no explicit picture is kept in the repo).
PORTRAIT = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
