"""Property-based fuzzing of the code that turns untrusted media into bytes, pixels and PCM.

Users send base64 blobs (`ws_edge.media`), image files and URLs (`workers.preprocess.images`,
`workers.preprocess.fetch`) and audio files or raw PCM (`workers.preprocess.audio_decode`).
The worker reports an in-band error for the `PreprocessError` family and treats anything
else as its own crash, so each decoder must, for any input, return a result within its
limits or raise one of its documented errors, and do so quickly (size checks before work).
Inputs: random bytes, and small real files made here (Pillow, `wave`, PyAV) with bytes
flipped, inserted, cut or their size fields rewritten. The URL check must refuse every
spelling of a private, loopback or metadata address, and the fetcher must never send a
request to a name that resolves to one.

Example counts: TURNSTREAM_FUZZ_EXAMPLES (default 100); e.g.
`TURNSTREAM_FUZZ_EXAMPLES=20000 pytest tests/unit/workers/preprocess/test_fuzz_media.py`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import io
import ipaddress
import os
import re
import socket
import struct
import wave
import zlib
from collections.abc import Callable
from typing import Any

import av
import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.unit.schemas.test_fuzz_codec import msgspec_strategy
from workers.preprocess.audio_decode import TARGET_RATE, decode_audio, decode_pcm16
from workers.preprocess.errors import (
    AudioTooLong,
    AudioUnreadable,
    ImageTooLarge,
    ImageUnreadable,
    UnsupportedMedia,
    UrlBlocked,
)
from workers.preprocess.fetch import FetchLimits, SafeFetcher, blocked_reason, check_url
from workers.preprocess.images import (
    ACCEPTED_FORMATS,
    ImageLimits,
    decode_image,
    preprocess_image,
    sniff_image_format,
)
from ws_edge.errors import InvalidMessage, MediaTooLarge
from ws_edge.media import (
    MAX_AUDIO_STREAMS,
    AudioBuffers,
    MediaLimits,
    decode_base64,
    turn_content,
)
from ws_edge.messages import AudioPart, CreateTurn, ImagePart, TextPart

EXAMPLES = int(os.environ.get("TURNSTREAM_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Far above what any of these small inputs needs on a loaded 2-core box, far below "hangs".

IMAGE_ERRORS = (ImageTooLarge, ImageUnreadable, UnsupportedMedia)
AUDIO_ERRORS = (AudioTooLong, AudioUnreadable, UnsupportedMedia)
IMAGE_LIMITS = ImageLimits(max_bytes=256 * 1024, max_pixels=1_000_000, max_side=2048)
MAX_SECONDS = 2.0
AUDIO_LIMITS = {"max_seconds": MAX_SECONDS, "max_bytes": 256 * 1024}


def outcome_of(call: Callable[[], Any], errors: tuple[type[Exception], ...]) -> Any:
    """The call's result, or None when it raised one of `errors`; anything else escapes.
    How long it took is not checked here (a hang meets the tests' timeout)."""
    try:
        return call()
    except errors:
        return None


@st.composite
def corrupted(draw: st.DrawFn, samples: list[bytes]) -> bytes:
    """A real file with 1-4 edits: bytes flipped, overwritten with extremes, inserted,
    deleted, a region duplicated, or the file cut."""
    data = bytearray(draw(st.sampled_from(samples)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        op = draw(st.sampled_from(["flip", "extreme", "insert", "delete", "repeat", "cut"]))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "extreme":
            data[at : at + 4] = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x00" * 4, b"\x7f"]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 256))] * draw(st.integers(1, 8))
        else:
            del data[at:]
    return bytes(data)


# ---- images ----------------------------------------------------------------------------------
def _encode(img: Image.Image, fmt: str, **params: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **params)
    return out.getvalue()


@functools.cache
def image_samples() -> list[bytes]:
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(rng.integers(0, 256, (16, 24, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90
    return [
        _encode(rgb, "PNG"),
        _encode(rgb.convert("RGBA"), "PNG"),
        _encode(rgb.convert("P"), "PNG", transparency=0),
        _encode(Image.fromarray(rng.integers(0, 65535, (8, 8), dtype=np.uint16)), "PNG"),
        _encode(rgb, "JPEG", quality=80),
        _encode(rgb, "JPEG", exif=exif.tobytes(), progressive=True),
        _encode(rgb.convert("CMYK"), "JPEG"),
        _encode(rgb.convert("P"), "GIF"),
        _encode(rgb, "WEBP"),
    ]


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares `width` x `height` but whose data is a few bytes."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat)


def jpeg_declaring(width: int, height: int) -> bytes:
    """The sample JPEG with its frame header (SOF0) rewritten to `width` x `height`."""
    data = bytearray(image_samples()[4])
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


images = st.one_of(
    st.binary(max_size=512),
    st.sampled_from(
        [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"RIFF\0\0\0\0WEBP"]
    ).flatmap(lambda magic: st.binary(max_size=256).map(lambda rest: magic + rest)),
    corrupted(image_samples()),
)
sides = st.integers(0, 2**32 - 1) | st.integers(0, 5000)


def check_image(img: Image.Image) -> None:
    assert img.mode == "RGB"
    width, height = img.size
    assert 0 < max(width, height) <= IMAGE_LIMITS.max_side
    assert width * height <= IMAGE_LIMITS.max_pixels


@FUZZ
@given(images)
def test_sniffing_names_an_accepted_format_or_refuses(data: bytes) -> None:
    assert outcome_of(lambda: sniff_image_format(data), (UnsupportedMedia,)) in (
        None,
        *ACCEPTED_FORMATS,
    )


@FUZZ
@given(images)
def test_decoding_any_image_bytes_gives_pixels_within_limits_or_a_media_error(
    data: bytes,
) -> None:
    img = outcome_of(lambda: decode_image(data, IMAGE_LIMITS), IMAGE_ERRORS)
    if img is not None:
        check_image(img)


@FUZZ
@given(images)
def test_preprocessing_any_image_bytes_gives_a_finite_tensor_or_a_media_error(
    data: bytes,
) -> None:
    processed = outcome_of(lambda: preprocess_image(data, IMAGE_LIMITS), IMAGE_ERRORS)
    if processed is None:
        return
    side = IMAGE_LIMITS.target
    assert processed.pixel_values.shape == (3, side, side)
    assert processed.pixel_values.dtype == np.float32
    assert np.isfinite(processed.pixel_values).all()
    assert not processed.pixel_values.flags.writeable
    assert 0 < max(processed.width, processed.height) <= IMAGE_LIMITS.max_side
    assert processed.width * processed.height <= IMAGE_LIMITS.max_pixels
    assert processed.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # expected here
@FUZZ
@given(st.sampled_from([png_declaring, jpeg_declaring]), sides, sides)
def test_a_declared_size_over_the_limits_is_refused_before_decoding(
    make: Callable[[int, int], bytes], width: int, height: int
) -> None:
    """Bombs cost a header read: a declared size over the limits is never decoded (refused
    as too large, or as unreadable when the header is invalid anyway, e.g. a PNG side over
    2^31), and one within them is never called too large."""
    if make is jpeg_declaring:  # a JPEG frame header holds 16-bit sides
        width, height = width % 65536, height % 65536
    data = make(width, height)
    over = max(width, height) > IMAGE_LIMITS.max_side or width * height > IMAGE_LIMITS.max_pixels
    try:
        img = outcome_of(lambda: decode_image(data, IMAGE_LIMITS), (ImageUnreadable,))
    except ImageTooLarge:
        assert over, f"{width}x{height} is within the limits"
        return
    if over:
        assert img is None, f"{width}x{height} was decoded"
        assert max(width, height) > 2**31 - 1 or make is jpeg_declaring or 0 in (width, height)
    if img is not None:
        check_image(img)


# ---- audio -----------------------------------------------------------------------------------
def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _wav(samples: np.ndarray, rate: int, width: int, channels: int = 1) -> bytes:
    """A WAV file through the stdlib `wave` writer (8-bit is unsigned, the rest signed)."""
    frames = np.repeat(samples[:, None], channels, axis=1)
    if width == 1:
        raw = (frames * 127 + 128).astype(np.uint8).tobytes()
    elif width == 3:
        ints = (frames * (2**23 - 1)).astype("<i4").reshape(-1, 1).view(np.uint8)
        raw = ints.reshape(-1, 4)[:, :3].tobytes()
    else:
        raw = (frames * (2 ** (8 * width - 1) - 1)).astype(f"<i{width}").tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return out.getvalue()


def _encoded(codec: str, container: str, seconds: float = 0.5, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with av.open(out, "w", format=container) as file:
        stream = file.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(
            _tone(seconds, rate).reshape(1, -1), format="flt", layout="mono"
        )
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            file.mux(packet)
        for packet in stream.encode(None):
            file.mux(packet)
    return out.getvalue()


@functools.cache
def audio_samples() -> list[bytes]:
    tone = _tone(0.5, 16000)
    return [
        _wav(tone, 16000, 2),
        _wav(tone, 16000, 1),
        _wav(_tone(0.25, 44100), 44100, 3, channels=2),
        _wav(tone, 8000, 4),
        _encoded("flac", "flac"),
        _encoded("libopus", "ogg"),
        _encoded("libopus", "webm"),
        _encoded("libmp3lame", "mp3"),
        _encoded("aac", "mp4"),
        *LONG_AUDIO(),
    ]


@functools.cache
def LONG_AUDIO() -> list[bytes]:
    """Over MAX_SECONDS: refused whole, and (cut or corrupted) never decoded past it."""
    return [
        _wav(_tone(3.0, 8000), 8000, 1),
        _encoded("flac", "flac", seconds=3.0, rate=8000),
        _encoded("libopus", "ogg", seconds=3.0),
        _encoded("libmp3lame", "mp3", seconds=3.0),
    ]


@st.composite
def wav_headers(draw: st.DrawFn) -> bytes:
    """A WAV file with every header field drawn (format tag, channels, rate, block align,
    bits, chunk sizes), followed by random sample bytes."""
    body = draw(st.binary(max_size=4096))
    fmt = struct.pack(
        "<HHIIHH",
        draw(st.sampled_from([1, 3, 6, 7, 0x11, 0xFFFE]) | st.integers(0, 0xFFFF)),
        draw(st.integers(0, 10) | st.integers(0, 0xFFFF)),
        draw(st.sampled_from([0, 1, 8000, 16000, 44100, 384_001]) | st.integers(0, 2**32 - 1)),
        draw(st.integers(0, 2**32 - 1)),
        draw(st.integers(0, 64) | st.integers(0, 0xFFFF)),
        draw(st.sampled_from([8, 16, 24, 32, 64]) | st.integers(0, 0xFFFF)),
    )
    fmt_size = draw(st.sampled_from([16, 18, 40]) | st.integers(0, 2**32 - 1))
    fmt += draw(st.binary(min_size=max(0, min(fmt_size, 40) - 16), max_size=24))
    data_size = draw(st.sampled_from([0, len(body), 0x7FFFF000]) | st.integers(0, 2**32 - 1))
    return (
        b"RIFF"
        + struct.pack("<I", draw(st.integers(0, 2**32 - 1)))
        + b"WAVEfmt "
        + struct.pack("<I", fmt_size)
        + fmt
        + b"data"
        + struct.pack("<I", data_size)
        + body
    )


audio_files = st.one_of(
    st.binary(max_size=1024),
    st.sampled_from([b"RIFF\0\0\0\0WAVE", b"OggS", b"\x1a\x45\xdf\xa3", b"fLaC", b"ID3"]).flatmap(
        lambda magic: st.binary(max_size=512).map(lambda rest: magic + rest)
    ),
    wav_headers(),
    corrupted(audio_samples()),
)


def check_pcm(pcm: np.ndarray) -> None:
    assert pcm.dtype == np.float32 and pcm.ndim == 1 and pcm.size > 0
    assert np.isfinite(pcm).all() and np.abs(pcm).max() <= 1.0
    # the duration limit holds (plus the resampler's few ms of delay)
    assert pcm.size <= MAX_SECONDS * TARGET_RATE + 1024, f"{pcm.size / TARGET_RATE:.2f} s"


# found by this test: a WAV whose format tag FFmpeg has no codec for (no codec context)
UNKNOWN_CODEC_WAV = (
    b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0"
    + struct.pack("<HHIIHH", 0, 0, 65536, 0, 0, 0)
    + b"data\0\0\0\0"
)


@FUZZ
@example(UNKNOWN_CODEC_WAV)
@given(audio_files)
def test_decoding_any_audio_bytes_gives_bounded_pcm_or_a_media_error(data: bytes) -> None:
    pcm = outcome_of(lambda: decode_audio(data, **AUDIO_LIMITS), AUDIO_ERRORS)
    if pcm is not None:
        check_pcm(pcm)


@FUZZ
@given(
    st.binary(max_size=4096),
    st.integers(-10, 10) | st.sampled_from([8000, 16000, 48000]) | st.integers(0, 2**31),
    st.integers(-2, 12),
)
def test_raw_pcm_of_any_length_rate_and_layout_decodes_or_is_refused(
    data: bytes, rate: int, channels: int
) -> None:
    pcm = outcome_of(
        lambda: decode_pcm16(data, rate, channels, **AUDIO_LIMITS),
        AUDIO_ERRORS,
    )
    if pcm is not None:
        check_pcm(pcm)


def test_the_audio_samples_decode_before_they_are_corrupted() -> None:
    """The corruption tests start from files the decoder reads: else they test nothing."""
    for sample in audio_samples():
        if sample in LONG_AUDIO():
            with pytest.raises(AudioTooLong):
                decode_audio(sample, **AUDIO_LIMITS)
        else:
            check_pcm(decode_audio(sample, **AUDIO_LIMITS))
    for sample in image_samples():
        check_image(decode_image(sample, IMAGE_LIMITS))


# ---- the edge: base64, audio buffers, a turn's parts -------------------------------------------
B64 = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


@FUZZ
@given(st.text(max_size=64) | st.binary(max_size=48).map(lambda b: base64.b64encode(b).decode()))
def test_base64_is_decoded_strictly_or_refused(text: str) -> None:
    try:
        data = decode_base64(text, "test")
    except InvalidMessage:
        return
    assert set(text.encode()) <= B64, f"{text!r} is not strict base64"
    assert data == base64.b64decode(text)


@FUZZ
@given(st.binary(max_size=256))
def test_base64_round_trips(data: bytes) -> None:
    assert decode_base64(base64.b64encode(data).decode(), "test") == data


AUDIO_BUFFER_LIMITS = MediaLimits(max_audio_buffer_bytes=1024)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "append", "append", "clear"]),
            st.sampled_from(["s1", "s2", "s3", "s4", "s5"]),
            st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode())
            | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
            | st.text(max_size=8),
        ),
        min_size=5,
        max_size=30,
    )
)
def test_audio_buffers_stay_within_their_limits(steps: list[tuple[str, str, str]]) -> None:
    """Against a model: a stream holds what was appended since it was last cleared, an
    append past the limit clears it, at most MAX_AUDIO_STREAMS streams exist."""
    buffers = AudioBuffers(AUDIO_BUFFER_LIMITS)
    limit = AUDIO_BUFFER_LIMITS.max_audio_buffer_bytes
    model: dict[str, bytes] = {}
    for op, stream, data in steps:
        if op == "clear":
            buffers.clear(stream)
            model.pop(stream, None)
            continue
        try:
            chunk: bytes | None = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):  # not base64 (or not even ASCII)
            chunk = None
        if chunk is None or (stream not in model and len(model) >= MAX_AUDIO_STREAMS):
            expected: type[Exception] | None = InvalidMessage  # and nothing changes
        elif len(model.get(stream, b"")) + len(chunk) > limit:
            expected = MediaTooLarge
            model.pop(stream, None)
        else:
            expected = None
            model[stream] = model.get(stream, b"") + chunk
        try:
            buffers.append(stream, data)
        except (InvalidMessage, MediaTooLarge) as err:
            assert type(err) is expected, (op, stream, data, err)
        else:
            assert expected is None, (op, stream, data)
        for name in ("s1", "s2", "s3", "s4", "s5"):
            held = buffers.peek(name)
            assert held == model.get(name, b"")
            assert len(held) <= limit


TURN_LIMITS = MediaLimits(max_media_bytes=2048, max_images=2, max_audio_buffer_bytes=4096)
blobs = st.binary(max_size=900).map(lambda b: base64.b64encode(b).decode())
urls = st.sampled_from(["https://a.example/x.png", "HTTPS://A.EXAMPLE/", "http://a/", "file:/"])
well_formed_parts = st.one_of(
    st.builds(TextPart, st.text(min_size=1, max_size=20)),
    st.builds(ImagePart, data=blobs),
    st.builds(ImagePart, url=urls),
    st.builds(AudioPart, data=blobs, format=st.sampled_from([None, "auto", "pcm16"])),
    st.builds(AudioPart, stream_id=st.sampled_from(["mic", "empty"])),
)


@FUZZ
@given(
    msgspec_strategy(
        CreateTurn,
        data=blobs | st.text(max_size=12),
        url=st.none() | urls | st.text(max_size=20),
        stream_id=st.none() | st.sampled_from(["mic", "empty"]),
        parts=st.lists(
            well_formed_parts | msgspec_strategy(TextPart) | msgspec_strategy(ImagePart),
            max_size=5,
        ),
    ),
    st.binary(max_size=3000),
)
def test_a_turns_parts_become_bounded_uploads_or_an_error(msg: CreateTurn, mic: bytes) -> None:
    buffers = AudioBuffers(TURN_LIMITS)
    if mic:
        buffers.append("mic", base64.b64encode(mic).decode())
    try:
        content = turn_content(msg, buffers, TURN_LIMITS)
    except (InvalidMessage, MediaTooLarge):
        assert buffers.peek("mic") == mic, "a refused turn took the stream's audio"
        return
    assert content.text.strip() or content.media or msg.tool_results
    assert len(content.text) <= TURN_LIMITS.max_text_chars
    assert sum(len(u.data) for u in content.uploads) <= TURN_LIMITS.max_media_bytes
    assert sum(m.kind == "image" for m in content.media) <= TURN_LIMITS.max_images
    assert sum(m.kind == "audio" for m in content.media) <= 1
    for ref in content.media:
        assert ref.url == "" or ref.url.lower().startswith("https://"), ref
    for upload in content.uploads:
        assert upload.data and upload.key == hashlib.sha256(upload.data).hexdigest()
    taken = any(isinstance(p, AudioPart) and p.stream_id == "mic" for p in msg.parts)
    assert buffers.peek("mic") == (b"" if taken else mic)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["text", "image url", "image data", "audio"]),
            st.binary(min_size=1, max_size=700),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_turn_with_valid_parts_is_refused_exactly_past_its_limits(
    parts: list[tuple[str, bytes]],
) -> None:
    """Counts and sizes against the limits, predicted: at most 2 images, 1 audio part,
    2048 bytes of uploads."""
    built: list[Any] = []
    for kind, blob in parts:
        data = base64.b64encode(blob).decode()
        built.append(
            {
                "text": TextPart("words"),
                "image url": ImagePart(url="https://a.example/x.png"),
                "image data": ImagePart(data=data),
                "audio": AudioPart(data=data),
            }[kind]
        )
    kinds = [kind for kind, _ in parts]
    uploaded = sum(len(blob) for kind, blob in parts if kind in ("image data", "audio"))
    fits = (
        kinds.count("image url") + kinds.count("image data") <= TURN_LIMITS.max_images
        and kinds.count("audio") <= 1
        and uploaded <= TURN_LIMITS.max_media_bytes
    )
    msg = CreateTurn(conversation_id="c", parts=built)
    try:
        content = turn_content(msg, AudioBuffers(TURN_LIMITS), TURN_LIMITS)
    except (InvalidMessage, MediaTooLarge):
        assert not fits, parts
        return
    assert fits, parts
    assert len(content.media) == len(parts) - kinds.count("text")


# ---- URLs ------------------------------------------------------------------------------------
# Written out here, not imported: the test's own list of what must never be fetched.
PRIVATE_V4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
PRIVATE_V6 = ["::1/128", "::/128", "fc00::/7", "fe80::/10", "ff00::/8", "2001:db8::/32"]
METADATA = ipaddress.IPv4Address("169.254.169.254")

private_v4 = st.one_of(
    st.just(METADATA),
    st.sampled_from(PRIVATE_V4).flatmap(lambda net: st.ip_addresses(network=net)),
)
private_v6 = st.sampled_from(PRIVATE_V6).flatmap(lambda net: st.ip_addresses(network=net))


V4_STYLES = ["dotted", "decimal", "hex", "HEX", "octal", "hex dotted", "a.b.c", "a.b", "padded"]


def spell(address: ipaddress.IPv4Address, style: str) -> str:
    """The address in a form an inet_aton-style resolver (or a browser) reads as it."""
    n, octets = int(address), [int(o) for o in str(address).split(".")]
    match style:
        case "dotted":
            return str(address)
        case "decimal":
            return str(n)
        case "hex":
            return hex(n)
        case "HEX":
            return "0X" + format(n, "X")
        case "octal":
            return ".".join(f"0{o:o}" for o in octets)
        case "hex dotted":
            return ".".join(hex(o) for o in octets)
        case "a.b.c":
            return f"{octets[0]}.{octets[1]}.{(octets[2] << 8) | octets[3]}"
        case "a.b":
            return f"{octets[0]}.{n & 0xFFFFFF}"
        case _:
            return ".".join(f"{o:03d}" for o in octets)


v4_spellings = st.builds(spell, private_v4, st.sampled_from(V4_STYLES))


@st.composite
def v6_spellings(draw: st.DrawFn) -> str:
    """Bracketed IPv6: private ones, and private IPv4 mapped, NAT64'd, 6to4'd or compatible."""
    style = draw(st.sampled_from(["v6", "mapped", "mapped hex", "nat64", "6to4", "compat"]))
    if style == "v6":
        address = draw(private_v6)
        text = draw(st.sampled_from([address.compressed, address.exploded]))
        return f"[{text}]"
    v4 = draw(private_v4)
    n = int(v4)
    match style:
        case "mapped":
            return f"[::ffff:{v4}]"
        case "mapped hex":
            return f"[::ffff:{n >> 16:x}:{n & 0xFFFF:x}]"
        case "nat64":
            return f"[64:ff9b::{n >> 16:x}:{n & 0xFFFF:x}]"
        case "6to4":
            return f"[2002:{n >> 16:x}:{n & 0xFFFF:x}::1]"
        case _:
            return f"[::{v4}]"


local_names = st.sampled_from(
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "api.localhost",
        "printer.local",
        "metadata.google.internal",
        "metadata",
        "intranet",
    ]
)


@st.composite
def hostile_urls(draw: st.DrawFn) -> str:
    host = draw(v4_spellings | v6_spellings() | local_names)
    if draw(st.booleans()) and not host.startswith("["):
        host += "."
    port = draw(st.sampled_from(["", ":443", ":80", ":8080", ":0443"]))
    path = draw(st.sampled_from(["/", "/latest/meta-data/", "", "/a.png?x=1#f"]))
    trick = draw(st.sampled_from(["plain", "userinfo", "scheme", "upper"]))
    match trick:
        case "userinfo":  # the host is the part after the last @
            return f"https://images.example.com@{host}{port}{path}"
        case "scheme":
            scheme = draw(st.sampled_from(["http", "file", "ftp", "gopher", "ws"]))
            return f"{scheme}://{host}{port}{path}"
        case "upper":
            return f"HTTPS://{host.upper()}{port}{path}"
    return f"https://{host}{port}{path}"


ALLOWED_PORTS = frozenset({443})


@FUZZ
@example("https://0177.0.0.1./")  # found by this test: httpx.InvalidURL escaped check_url
@given(hostile_urls())
def test_every_spelling_of_a_private_address_is_refused(url: str) -> None:
    with pytest.raises(UrlBlocked):
        check_url(url, ALLOWED_PORTS)


@FUZZ
@given(
    st.text(max_size=60)
    | st.builds(
        lambda scheme, rest: f"{scheme}{rest}",
        st.sampled_from(["https://", "HTTPS://", "https:", "//", "https:///"]),
        st.text(max_size=40),
    )
)
def test_any_url_is_accepted_only_when_it_fits_the_policy(url: str) -> None:
    try:
        target = check_url(url, ALLOWED_PORTS)
    except UrlBlocked:
        return
    assert target.url.scheme == "https" and not target.url.userinfo
    assert (target.url.port or 443) in ALLOWED_PORTS
    labels = target.host.split(".")
    if target.literal is None:
        assert len(labels) > 1 and labels[-1] not in ("localhost", "local", "internal")
        # WHATWG: a host whose last label is a number is an IPv4 address, not a name
        assert not re.fullmatch(r"0x[0-9a-f]*|[0-9]+", labels[-1]), target
    else:
        assert blocked_reason(target.literal) is None, target


public_v4 = st.ip_addresses(v=4).filter(lambda a: blocked_reason(a) is None)


@FUZZ
@given(
    st.lists(public_v4.map(str), max_size=3),
    st.lists(v4_spellings | private_v6.map(str), max_size=2),
    st.randoms(use_true_random=False),
)
def test_a_name_is_fetched_only_from_the_public_addresses_it_resolves_to(
    public: list[str], private: list[str], rng: Any
) -> None:
    """DNS may answer anything (rebinding, a private answer among public ones): one private
    answer refuses the URL, and a request only ever goes to a checked address."""
    answers = public + private
    rng.shuffle(answers)
    assume(answers)
    sent: list[httpx.Request] = []

    async def resolve(host: str) -> list[str]:
        return answers

    async def respond(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, content=b"\x89PNG\r\n\x1a\n")

    async def fetch() -> None:
        transport = httpx.MockTransport(respond)
        limits = FetchLimits(total_s=5.0)
        async with SafeFetcher(limits, transport=transport, resolver=resolve) as fetcher:
            await fetcher.fetch("https://img.example.com/a.png")

    try:
        asyncio.run(fetch())
    except UrlBlocked:
        assert private, "only public answers, yet refused"
        assert sent == [], "a request went out before every answer was checked"
        return
    assert not private, f"fetched although {private} were among the answers"
    [request] = sent
    assert request.url.host in public
    assert request.headers["host"] == "img.example.com"


@FUZZ
@given(private_v4, st.sampled_from(V4_STYLES))
def test_the_hostile_spellings_mean_the_private_address(
    address: ipaddress.IPv4Address, style: str
) -> None:
    """Guards the strategy: the C resolver's inet_aton reads each spelling as the address
    (so refusing them is refusing that address, not refusing nonsense)."""
    spelled = spell(address, style)
    if style == "padded":  # leading zeros are octal to inet_aton: another address, or none
        return
    assert socket.inet_aton(spelled) == address.packed, spelled
