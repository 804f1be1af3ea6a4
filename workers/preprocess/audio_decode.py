"""Audio bytes → float32 mono 16 kHz samples in [-1, 1], within byte and duration limits.

Why it is shaped this way:
- The user controls the bytes, so work is bounded before and during decoding: the byte limit is
  checked before anything is parsed, and decoding stops the moment the decoded duration passes
  `max_seconds` (a 1 MB Opus file can hold hours of audio; we never decode past the limit).
  Header durations are never used to size buffers; an exact declared duration (Ogg, Matroska,
  MP4, FLAC) over the limit is rejected before decoding, and one far above what actually decodes
  means the file is truncated or corrupt.
- The container is sniffed from magic bytes and FFmpeg is *forced* to that demuxer (plus a
  demuxer whitelist), so FFmpeg never probes arbitrary formats: no playlist demuxers (HLS,
  concat) that open other files or URLs, no image/text demuxers. Codecs are allowlisted too.
- WAV with PCM/float samples is parsed here, tolerating streaming writers' placeholder sizes
  (espeak-ng writes data size 0x7FFFF000): the duration is known from the byte count before any
  conversion, and it is faster than going through FFmpeg. Other WAV codecs go to FFmpeg.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO

import av
import av.error
import numpy as np

from workers.preprocess.errors import AudioTooLong, AudioUnreadable, UnsupportedMedia

TARGET_RATE = 16_000
MAX_CHANNELS = 8
MIN_RATE, MAX_RATE = 1_000, 384_000

# FFmpeg demuxers we force after sniffing; nothing else is ever opened.
_DEMUXERS = ("wav", "ogg", "matroska", "mp3", "aac", "flac", "mov")
# Decoders (FFmpeg's decoder names) of what browsers and phones record, plus the PCM variants
# WAV can carry.
_CODECS = frozenset(
    {
        "opus",
        "libopus",
        "vorbis",
        "libvorbis",
        "mp3",
        "mp3float",
        "aac",
        "aac_fixed",
        "flac",
        "alac",
        "pcm_s16le",
        "pcm_s16be",
        "pcm_s24le",
        "pcm_s32le",
        "pcm_f32le",
        "pcm_f64le",
        "pcm_u8",
        "pcm_mulaw",
        "pcm_alaw",
        "adpcm_ima_wav",
        "adpcm_ms",
    }
)
# Formats whose container duration is exact (not estimated from the bitrate like MP3/ADTS).
_EXACT_DURATION = frozenset({"ogg", "matroska", "mov", "flac"})
# Slack before a declared duration counts as over the limit.
_DECLARED_SLACK_S = 1.0
# How far decoding may fall short of an exact declared duration (codec delay, rounding) before
# the file counts as truncated or corrupt: the larger of these.
_SHORTFALL_S, _SHORTFALL_FRACTION = 0.2, 0.05
# Data sizes streaming WAV writers put in the header before they know the length.
_WAV_PLACEHOLDER_MIN = 0x7F00_0000
_RESAMPLE_CHUNK = 1 << 16


@dataclass(frozen=True)
class _Sniffed:
    demuxer: str  # FFmpeg demuxer name ("wav" is parsed natively when it can be)
    label: str  # what messages call it


def sniff_format(data: bytes) -> str:
    """Short name of the audio container (`wav`, `ogg`, `webm`, `mp3`, `aac`, `flac`, `mp4`).

    Raises UnsupportedMedia for recognizably non-audio bytes (images, text, SVG, PDF…) and for
    bytes no accepted audio format starts with."""
    return _sniff(data).label


def decode_audio(data: bytes, *, max_seconds: float, max_bytes: int) -> np.ndarray:
    """Decode a whole audio file (WAV, WebM/Opus, Ogg/Opus|Vorbis, MP3, AAC/M4A, FLAC).

    Returns float32 mono at 16 kHz in [-1, 1]. Raises AudioTooLong (over `max_bytes` bytes or
    `max_seconds` of audio), UnsupportedMedia (not audio, a video-only file, a codec we do not
    accept) or AudioUnreadable (empty, corrupt, truncated, no samples)."""
    _check_bytes(data, max_bytes)
    sniffed = _sniff(data)
    if sniffed.demuxer == "wav":
        wav = _parse_wav(data)
        if wav is not None:
            return _decode_wav_pcm(data, wav, max_seconds)
    return _decode_with_ffmpeg(data, sniffed, max_seconds)


def decode_pcm16(
    data: bytes, sample_rate: int, channels: int = 1, *, max_seconds: float, max_bytes: int
) -> np.ndarray:
    """Decode raw little-endian 16-bit PCM (interleaved when `channels` > 1), as streamed by a
    microphone, to float32 mono 16 kHz in [-1, 1]. Same limits and errors as `decode_audio`."""
    _check_bytes(data, max_bytes)
    if not MIN_RATE <= sample_rate <= MAX_RATE:
        raise UnsupportedMedia(f"PCM sample rate {sample_rate} Hz is outside {MIN_RATE}-{MAX_RATE}")
    if not 1 <= channels <= MAX_CHANNELS:
        raise UnsupportedMedia(f"PCM with {channels} channels (accepted: 1-{MAX_CHANNELS})")
    frame_bytes = 2 * channels
    if len(data) % frame_bytes:
        raise AudioUnreadable(
            f"PCM is {len(data)} bytes, not a whole number of {frame_bytes}-byte frames "
            f"(16-bit, {channels} channel(s)): truncated or wrong format"
        )
    _check_seconds(len(data) // frame_bytes / sample_rate, max_seconds, "PCM audio")
    samples = np.frombuffer(data, dtype="<i2").reshape(-1, channels)
    mono = _downmix(samples.astype(np.float32) / 32768.0)
    return _finish(resample_mono(mono, sample_rate), "PCM audio")


def resample_mono(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Resample float32 mono to 16 kHz with FFmpeg's swresample.

    swresample is a windowed-sinc polyphase resampler in C: it filters above the new Nyquist
    (22.05/44.1/48 kHz → 16 kHz aliases audibly with linear interpolation, which hurts ASR) and
    runs hundreds of times faster than real time; a numpy polyphase filter would be slower and
    more code. It is the same resampler the compressed formats go through, so every input path
    produces the same signal. Works in 64 k-sample chunks to bound its working memory."""
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if sample_rate == TARGET_RATE or samples.size == 0:
        return samples
    resampler = av.AudioResampler(format="flt", layout="mono", rate=TARGET_RATE)
    out: list[np.ndarray] = []
    for start in range(0, samples.size, _RESAMPLE_CHUNK):
        chunk = samples[start : start + _RESAMPLE_CHUNK].reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
        frame.sample_rate = sample_rate
        out.extend(f.to_ndarray()[0] for f in resampler.resample(frame))
    out.extend(f.to_ndarray()[0] for f in resampler.resample(None))
    return np.concatenate(out) if out else np.zeros(0, np.float32)


# --- limits and finishing ---------------------------------------------------------------------


def _check_bytes(data: bytes, max_bytes: int) -> None:
    if not data:
        raise AudioUnreadable("audio is empty (0 bytes)")
    if len(data) > max_bytes:
        raise AudioTooLong(f"audio is {len(data)} bytes, over the {max_bytes}-byte limit")


def _check_seconds(seconds: float, max_seconds: float, what: str) -> None:
    if seconds > max_seconds:
        raise AudioTooLong(f"{what} is {seconds:.1f} s long, over the {max_seconds:g} s limit")


def _downmix(samples: np.ndarray) -> np.ndarray:
    """(frames, channels) → mono by averaging: no gain change, unlike swresample's stereo→mono
    matrix (L+R)·0.707, which can push loud recordings past full scale."""
    if samples.shape[1] == 1:
        return samples[:, 0]
    return samples.mean(axis=1, dtype=np.float32)


def _finish(mono: np.ndarray, what: str) -> np.ndarray:
    if mono.size == 0:
        raise AudioUnreadable(f"{what} holds no audio samples")
    if not np.isfinite(mono).all():
        raise AudioUnreadable(f"{what} holds NaN or infinite samples (corrupt float data)")
    return np.clip(mono, -1.0, 1.0, out=np.ascontiguousarray(mono, dtype=np.float32))


# --- sniffing ---------------------------------------------------------------------------------

_NON_AUDIO_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"\x7fELF", "an executable"),
)


def _sniff(data: bytes) -> _Sniffed:
    head = data[:64]
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return _Sniffed("wav", "wav")
    if head[:4] == b"RIFF":
        kind = head[8:12].decode("latin-1").strip() or "unknown"
        raise UnsupportedMedia(f"not audio: a RIFF {kind} file (only RIFF WAVE is audio)")
    if head[:4] == b"OggS":
        return _Sniffed("ogg", "ogg")
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return _Sniffed("matroska", "webm")
    if head[4:8] == b"ftyp":
        if head[8:12] in (b"avif", b"avis", b"heic", b"heix", b"mif1", b"msf1"):
            raise UnsupportedMedia("not audio: an AVIF/HEIF image")
        return _Sniffed("mov", "mp4")
    body = data[_id3_size(data) :] if head[:3] == b"ID3" else data
    if body[:4] == b"fLaC":
        return _Sniffed("flac", "flac")
    if _is_adts(body):
        return _Sniffed("aac", "aac")
    if head[:3] == b"ID3" or _is_mpeg_audio(body):
        return _Sniffed("mp3", "mp3")
    for magic, what in _NON_AUDIO_MAGIC:
        if head.startswith(magic):
            raise UnsupportedMedia(f"not audio: {what}")
    if head[:2] == b"BM" and head[6:10] == bytes(4):
        raise UnsupportedMedia("not audio: a BMP image")
    text = _as_text(data[:4096])
    if text is not None:
        stripped = text.lstrip("\ufeff \t\r\n").lower()
        if stripped.startswith("<") and "<svg" in text.lower():
            raise UnsupportedMedia("not audio: an SVG image")
        if stripped.startswith("<"):
            raise UnsupportedMedia("not audio: XML/HTML text")
        raise UnsupportedMedia("not audio: plain text")
    raise UnsupportedMedia(f"unrecognized audio format (starts with {head[:8].hex()})")


def _id3_size(data: bytes) -> int:
    """Length of a leading ID3v2 tag (its size is a 28-bit "syncsafe" integer)."""
    if len(data) < 10:
        return len(data)
    size = 0
    for byte in data[6:10]:
        size = (size << 7) | (byte & 0x7F)
    footer = 10 if data[5] & 0x10 else 0
    return 10 + size + footer


def _is_adts(b: bytes) -> bool:
    # 12-bit sync, layer bits 00 (MPEG-1/2 audio frames never use layer 00).
    return len(b) >= 7 and b[0] == 0xFF and (b[1] & 0xF6) == 0xF0


def _is_mpeg_audio(b: bytes) -> bool:
    if len(b) < 4 or b[0] != 0xFF or (b[1] & 0xE0) != 0xE0:
        return False
    version, layer = (b[1] >> 3) & 0x3, (b[1] >> 1) & 0x3
    bitrate, rate = b[2] >> 4, (b[2] >> 2) & 0x3
    return version != 1 and layer != 0 and bitrate != 0xF and rate != 0x3


def _as_text(sample: bytes) -> str | None:
    """The sample as text when it is UTF-8 without control bytes (a cut multibyte character at
    the end is allowed)."""
    for cut in range(4):
        try:
            text = sample[: len(sample) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f")
        return text if text and controls == 0 else None
    return None


# --- WAV, parsed natively -----------------------------------------------------------------------


@dataclass(frozen=True)
class _WavInfo:
    sample_format: str  # "int" or "float"
    bits: int
    channels: int
    rate: int
    data_start: int
    data_len: int


def _parse_wav(data: bytes) -> _WavInfo | None:
    """Header of a PCM/float WAV; None when its codec is one FFmpeg should decode (μ-law,
    ADPCM…) or it is RF64. Tolerates placeholder sizes; a real size larger than the file means
    the file was cut."""
    if data[:4] != b"RIFF":
        return None
    pos, fmt = 12, None
    while pos + 8 <= len(data):
        chunk_id, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise AudioUnreadable("truncated WAV: the fmt chunk is cut short")
            fmt = data[body : body + min(size, 40)]
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioUnreadable("malformed WAV: data chunk before the fmt chunk")
            available = len(data) - body
            if size == 0 or size >= _WAV_PLACEHOLDER_MIN:
                size = available  # written while streaming, never patched
            elif size > available:
                raise AudioUnreadable(
                    f"truncated WAV: the data chunk declares {size} bytes, {available} present"
                )
            return _wav_info(fmt, body, size)
        pos = body + size + (size & 1)
    if fmt is None:
        raise AudioUnreadable("malformed WAV: no fmt chunk")
    raise AudioUnreadable("malformed WAV: no data chunk")


def _wav_info(fmt: bytes, data_start: int, data_len: int) -> _WavInfo | None:
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == 0xFFFE and len(fmt) >= 26:  # WAVE_FORMAT_EXTENSIBLE: real tag opens the GUID
        tag = struct.unpack_from("<H", fmt, 24)[0]
    kind = {1: "int", 3: "float"}.get(tag)
    if kind is None or (kind, bits) not in {
        ("int", 8),
        ("int", 16),
        ("int", 24),
        ("int", 32),
        ("float", 32),
        ("float", 64),
    }:
        return None
    if not 1 <= channels <= MAX_CHANNELS:
        raise UnsupportedMedia(f"WAV with {channels} channels (accepted: 1-{MAX_CHANNELS})")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioUnreadable(f"malformed WAV: sample rate {rate} Hz")
    if block_align != channels * bits // 8:
        raise AudioUnreadable(
            f"malformed WAV: block align {block_align} for {channels} x {bits}-bit samples"
        )
    return _WavInfo(kind, bits, channels, rate, data_start, data_len)


def _decode_wav_pcm(data: bytes, wav: _WavInfo, max_seconds: float) -> np.ndarray:
    frame_bytes = wav.channels * wav.bits // 8
    frames = wav.data_len // frame_bytes
    _check_seconds(frames / wav.rate, max_seconds, "WAV audio")
    raw = np.frombuffer(data, np.uint8, frames * frame_bytes, wav.data_start)
    if wav.sample_format == "float":
        samples = raw.view("<f4" if wav.bits == 32 else "<f8").astype(np.float32)
    elif wav.bits == 8:
        samples = (raw.astype(np.float32) - 128.0) / 128.0
    elif wav.bits == 24:
        triplets = raw.reshape(-1, 3).astype(np.int32)
        ints = triplets[:, 0] | (triplets[:, 1] << 8) | (triplets[:, 2] << 16)
        samples = ((ints << 8) >> 8).astype(np.float32) / float(1 << 23)
    else:
        dtype, scale = ("<i2", 32768.0) if wav.bits == 16 else ("<i4", float(1 << 31))
        samples = raw.view(dtype).astype(np.float32) / scale
    mono = _downmix(samples.reshape(-1, wav.channels))
    return _finish(resample_mono(mono, wav.rate), "WAV audio")


# --- everything else, through FFmpeg ----------------------------------------------------------


def _ffmpeg_reason(exc: av.error.FFmpegError) -> str:
    if isinstance(exc, av.error.EOFError):
        return "unexpected end of data, the file looks truncated"
    return exc.strerror or type(exc).__name__


def _ogg_ends_cleanly(data: bytes) -> bool:
    """Whether the last Ogg page carries the end-of-stream flag. Ogg cut at a page boundary
    demuxes without error (even its duration is read from the last page present), so the
    missing EOS page is the only sign it was truncated; every finished writer sets it."""
    last = data.rfind(b"OggS", max(0, len(data) - 65_536))
    return last >= 0 and len(data) > last + 5 and bool(data[last + 5] & 0x04)


def _decode_with_ffmpeg(data: bytes, sniffed: _Sniffed, max_seconds: float) -> np.ndarray:
    label = sniffed.label
    if sniffed.demuxer == "ogg" and not _ogg_ends_cleanly(data):
        raise AudioUnreadable("ogg: truncated, the last page is not an end-of-stream page")
    try:
        container = av.open(
            BytesIO(data),
            mode="r",
            format=sniffed.demuxer,
            options={"format_whitelist": ",".join(_DEMUXERS)},
        )
    except av.error.FFmpegError as exc:
        raise AudioUnreadable(
            f"{label}: cannot parse the container ({_ffmpeg_reason(exc)})"
        ) from exc
    except UnicodeDecodeError as exc:  # PyAV reads the tags as UTF-8 when it opens the file
        raise AudioUnreadable(f"{label}: metadata tags that are not UTF-8") from exc
    with container:
        stream = _audio_stream(container, label)
        declared = _declared_seconds(container, stream, sniffed.demuxer)
        if declared is not None and declared > max_seconds + _DECLARED_SLACK_S:
            raise AudioTooLong(
                f"{label} declares {declared:.1f} s of audio, over the {max_seconds:g} s limit"
            )
        codec = stream.codec_context.name
        decoder = _StreamDecoder(max_seconds, label)
        try:
            for packet in container.demux(stream):
                for frame in packet.decode():
                    decoder.add(frame)
        except av.error.FFmpegError as exc:
            raise AudioUnreadable(
                f"{label}: corrupt {codec} data near {decoder.seconds:.2f} s "
                f"({_ffmpeg_reason(exc)})"
            ) from exc
        mono = decoder.finish()
    if mono.size == 0:
        raise AudioUnreadable(f"{label}: no audio samples could be decoded")
    if declared is not None and decoder.seconds < declared - max(
        _SHORTFALL_S, _SHORTFALL_FRACTION * declared
    ):
        raise AudioUnreadable(
            f"{label}: truncated or corrupt, decoded {decoder.seconds:.2f} s of the "
            f"{declared:.2f} s the container declares"
        )
    return _finish(mono, label)


def _audio_stream(container: av.container.InputContainer, label: str) -> av.AudioStream:
    audio = list(container.streams.audio)
    if not audio:
        if container.streams.video:
            raise UnsupportedMedia(f"{label} holds video but no audio track")
        raise AudioUnreadable(f"{label}: the container holds no audio stream")
    stream = audio[0]
    if stream.codec_context is None:  # a header with no usable format (found by fuzzing)
        raise AudioUnreadable(f"{label}: the audio stream has no decodable format")
    codec = stream.codec_context.name
    if codec not in _CODECS:
        raise UnsupportedMedia(f"{label}: audio codec {codec!r} is not accepted")
    ctx = stream.codec_context
    if not MIN_RATE <= ctx.sample_rate <= MAX_RATE:
        raise AudioUnreadable(f"{label}: implausible sample rate {ctx.sample_rate} Hz")
    if not 1 <= ctx.channels <= MAX_CHANNELS:
        raise UnsupportedMedia(f"{label}: {ctx.channels} channels (accepted: 1-{MAX_CHANNELS})")
    return stream


def _declared_seconds(
    container: av.container.InputContainer, stream: av.AudioStream, demuxer: str
) -> float | None:
    """The duration the container states, where it is exact rather than estimated."""
    if demuxer not in _EXACT_DURATION:
        return None
    if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
        return float(stream.duration * stream.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / av.time_base
    return None


class _StreamDecoder:
    """Accumulates decoded frames as 16 kHz mono, counting source duration so decoding stops
    as soon as it passes the limit. Rebuilds the resampler if the stream changes its rate or
    layout mid-way (chained Ogg)."""

    def __init__(self, max_seconds: float, label: str) -> None:
        self._max_seconds = max_seconds
        self._label = label
        self._resampler: av.AudioResampler | None = None
        self._key: tuple[str, int, int] | None = None
        self._chunks: list[np.ndarray] = []
        self.seconds = 0.0

    def add(self, frame: av.AudioFrame) -> None:
        rate = frame.sample_rate
        if not MIN_RATE <= rate <= MAX_RATE:
            raise AudioUnreadable(f"{self._label}: implausible sample rate {rate} Hz in a frame")
        channels = len(frame.layout.channels)
        if not 1 <= channels <= MAX_CHANNELS:
            raise UnsupportedMedia(f"{self._label}: {channels} channels in a frame")
        self.seconds += frame.samples / rate
        if self.seconds > self._max_seconds:
            raise AudioTooLong(
                f"{self._label} is longer than the {self._max_seconds:g} s limit "
                f"(stopped decoding at {self.seconds:.1f} s)"
            )
        key = (frame.format.name, channels, rate)
        if key != self._key:
            self._flush()
            # Keep the channels (planar float); _downmix averages them.
            self._resampler = av.AudioResampler(format="fltp", layout=None, rate=TARGET_RATE)
            self._key = key
        frame.pts = None  # concatenate in decode order; gaps in timestamps are not ours to fill
        assert self._resampler is not None
        self._take(self._resampler.resample(frame))

    def finish(self) -> np.ndarray:
        self._flush()
        if not self._chunks:
            return np.zeros(0, np.float32)
        return np.concatenate(self._chunks)

    def _flush(self) -> None:
        if self._resampler is not None:
            self._take(self._resampler.resample(None))
            self._resampler = None

    def _take(self, frames: list[av.AudioFrame]) -> None:
        for out in frames:
            self._chunks.append(_downmix(out.to_ndarray().T))
