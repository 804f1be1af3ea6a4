"""A recorded turn's media as files of an eval set (pure).

The blob store keeps uploads only for `TURNSTREAM_MEDIA_TTL_S` (an hour by default), so a
set copies the bytes it needs into its own `media/` folder: `media/<sha256>.<ext>`, named by
the file's content. Raw microphone audio (`pcm16`) is stored as a WAV file: `MediaItem` has
no field for the sample rate a raw stream needs, and a WAV header carries it (the
preprocessing worker sniffs WAV), so a replay plays exactly what the user said.
"""

from __future__ import annotations

import io
import wave

from runtime.blobs import sha256_hex
from schemas.events import MediaRef
from schemas.flywheel import MediaItem

MEDIA_DIR = "media"

# (magic at offset 0, extension); RIFF and ISO-BMFF are told apart below
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"OggS", "ogg"),
    (b"fLaC", "flac"),
    (b"ID3", "mp3"),
    (b"\x1a\x45\xdf\xa3", "webm"),
)


def extension(data: bytes) -> str:
    """A file extension from the bytes' magic (for people browsing the set; replays sniff
    the bytes themselves); `bin` when unknown."""
    head = data[:64]
    if head[:4] == b"RIFF":
        return {b"WAVE": "wav", b"WEBP": "webp"}.get(head[8:12], "bin")
    if head[4:8] == b"ftyp":
        return "mp4"
    for magic, ext in _MAGIC:
        if head.startswith(magic):
            return ext
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "mp3"  # an MPEG audio frame header
    if b"<svg" in data[:1024].lower():
        return "svg"
    return "bin"


def wav_from_pcm16(data: bytes, sample_rate: int, channels: int = 1) -> bytes:
    """Raw little-endian 16-bit PCM in a WAV container (lossless)."""
    if sample_rate <= 0:
        raise ValueError(f"pcm16 audio without a sample rate ({sample_rate})")
    if len(data) % (2 * channels):
        raise ValueError(f"pcm16 audio of {len(data)} bytes is not whole frames")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(data)
    return out.getvalue()


def media_file(ref: MediaRef, data: bytes) -> tuple[MediaItem, bytes]:
    """The set's file for one media reference and its recorded bytes: the item that names
    it and the bytes to write. Raises ValueError for bytes that cannot be stored as is."""
    fmt = ref.format
    if fmt == "pcm16":
        data, fmt = wav_from_pcm16(data, ref.sample_rate), ""  # sniffed as WAV on replay
    digest = sha256_hex(data)
    item = MediaItem(
        kind=str(ref.kind),
        path=f"{MEDIA_DIR}/{digest}.{extension(data)}",
        sha256=digest,
        format=fmt,
    )
    return item, data
