"""Media of a `turn.create`, pure: base64 parts → references for the event + blobs to store.

The edge checks only what it can check cheaply and exactly (base64, sizes, counts, the URL
scheme); decoding and fetching happen in the preprocessing worker, which reports problems
in-band. Audio sent in pieces (`audio.append`) is buffered per stream, bounded.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from dataclasses import dataclass, field

from runtime.blobs import sha256_hex
from schemas.events import MediaKind, MediaRef
from ws_edge.errors import InvalidMessage, MediaTooLarge
from ws_edge.messages import AudioPart, CreateTurn, ImagePart, TextPart

MAX_AUDIO_STREAMS = 4
DEFAULT_STREAM_RATE = 16000


@dataclass(frozen=True, slots=True)
class MediaLimits:
    max_media_bytes: int = 10 * 1024 * 1024
    max_images: int = 4
    max_audio_buffer_bytes: int = 4 * 1024 * 1024
    max_text_chars: int = 8000


@dataclass(frozen=True, slots=True)
class Upload:
    """A blob the shell stores (content-addressed) before it publishes the turn."""

    key: str
    data: bytes


@dataclass(frozen=True, slots=True)
class TurnContent:
    text: str
    media: list[MediaRef]
    uploads: list[Upload]


def decode_base64(data: str, what: str) -> bytes:
    try:
        return b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessage(f"{what}: `data` is not valid base64") from None


@dataclass
class AudioBuffers:
    """Microphone audio per stream id, until a `turn.create` takes it (or `audio.clear`)."""

    limits: MediaLimits
    _streams: dict[str, bytearray] = field(default_factory=dict)

    def append(self, stream_id: str, data: str) -> None:
        chunk = decode_base64(data, f"audio.append {stream_id!r}")
        buffer = self._streams.get(stream_id)
        if buffer is None:
            if len(self._streams) >= MAX_AUDIO_STREAMS:
                raise InvalidMessage(
                    f"at most {MAX_AUDIO_STREAMS} audio streams may be open; "
                    "use one or send audio.clear"
                )
            buffer = self._streams[stream_id] = bytearray()
        if len(buffer) + len(chunk) > self.limits.max_audio_buffer_bytes:
            del self._streams[stream_id]
            raise MediaTooLarge(
                f"audio stream {stream_id!r} is over {self.limits.max_audio_buffer_bytes} "
                "bytes; it was cleared"
            )
        buffer.extend(chunk)

    def clear(self, stream_id: str) -> None:
        self._streams.pop(stream_id, None)

    def peek(self, stream_id: str) -> bytes:
        """The stream's audio so far (left in place until the turn is known to be valid)."""
        return bytes(self._streams.get(stream_id, b""))


def turn_content(msg: CreateTurn, buffers: AudioBuffers, limits: MediaLimits) -> TurnContent:
    """Split a `turn.create` into the text, media references and uploads of the turn.
    Nothing is taken from `buffers` unless the whole message is valid."""
    texts = [msg.text] if msg.text else []
    media: list[MediaRef] = []
    uploads: list[Upload] = []
    streams: list[str] = []
    images = audio = 0
    for index, part in enumerate(msg.parts):
        what = f"parts[{index}] ({part.__struct_config__.tag})"
        match part:
            case TextPart():
                texts.append(part.text)
            case ImagePart():
                images += 1
                media.append(_image(part, what, uploads))
            case AudioPart():
                audio += 1
                if part.stream_id is not None:
                    streams.append(part.stream_id)
                media.append(_audio(part, what, buffers, uploads))
    text = "\n".join(texts)
    if not text.strip() and not media and not msg.tool_results:
        raise InvalidMessage("a turn needs text, media parts or tool results")
    if len(text) > limits.max_text_chars:
        raise InvalidMessage(
            f"text is {len(text)} characters; the limit is {limits.max_text_chars}"
        )
    if images > limits.max_images:
        raise MediaTooLarge(f"{images} images in one turn; the limit is {limits.max_images}")
    if audio > 1:
        raise InvalidMessage("a turn takes at most one audio part")
    total = sum(len(u.data) for u in uploads)
    if total > limits.max_media_bytes:
        raise MediaTooLarge(f"media are {total} bytes; the limit is {limits.max_media_bytes}")
    for stream_id in streams:
        buffers.clear(stream_id)
    return TurnContent(text, media, uploads)


def _upload(data: bytes, uploads: list[Upload]) -> str:
    key = sha256_hex(data)
    uploads.append(Upload(key, data))
    return key


def _image(part: ImagePart, what: str, uploads: list[Upload]) -> MediaRef:
    if (part.data is None) == (part.url is None):
        raise InvalidMessage(f"{what}: give exactly one of `data` or `url`")
    if part.url is not None:
        if not part.url.lower().startswith("https://"):
            raise InvalidMessage(f"{what}: image URLs must be https://")
        return MediaRef(kind=MediaKind.IMAGE, url=part.url)
    data = decode_base64(part.data or "", what)
    if not data:
        raise InvalidMessage(f"{what}: the image is empty")
    return MediaRef(kind=MediaKind.IMAGE, sha256=_upload(data, uploads), size_bytes=len(data))


def _audio(part: AudioPart, what: str, buffers: AudioBuffers, uploads: list[Upload]) -> MediaRef:
    if (part.data is None) == (part.stream_id is None):
        raise InvalidMessage(f"{what}: give exactly one of `data` or `stream_id`")
    if part.stream_id is not None:
        data = buffers.peek(part.stream_id)
        if not data:
            raise InvalidMessage(
                f"{what}: audio stream {part.stream_id!r} is empty: send audio.append first"
            )
        fmt = part.format or "pcm16"
    else:
        data = decode_base64(part.data or "", what)
        fmt = part.format or "auto"
    if not data:
        raise InvalidMessage(f"{what}: the audio is empty")
    if fmt == "pcm16":
        if len(data) % 2:
            raise InvalidMessage(f"{what}: PCM16 audio has an odd number of bytes")
        rate = part.sample_rate or DEFAULT_STREAM_RATE
        if part.stream_id is None and part.sample_rate is None:
            raise InvalidMessage(f"{what}: raw pcm16 audio needs `sample_rate`")
        return MediaRef(
            kind=MediaKind.AUDIO,
            sha256=_upload(data, uploads),
            size_bytes=len(data),
            format="pcm16",
            sample_rate=rate,
            language=part.language or "",
        )
    return MediaRef(
        kind=MediaKind.AUDIO,
        sha256=_upload(data, uploads),
        size_bytes=len(data),
        language=part.language or "",
    )
