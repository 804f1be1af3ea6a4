"""Decoding untrusted audio bytes: formats, resampling, limits, and the errors clients see."""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest

from harness.media import count_conversions, espeak_wav
from workers.preprocess import audio_decode
from workers.preprocess.audio_decode import (
    decode_audio,
    decode_pcm16,
    resample_mono,
    sniff_format,
)
from workers.preprocess.errors import AudioTooLong, AudioUnreadable, UnsupportedMedia

LIMITS = {"max_seconds": 60.0, "max_bytes": 50_000_000}


def tone(freq: float, seconds: float, rate: int, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_hz(x: np.ndarray, rate: int = 16_000) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def wav_bytes(
    samples: np.ndarray,
    rate: int,
    *,
    channels: int = 1,
    tag: int = 1,
    bits: int = 16,
    data_size: int | None = None,
) -> bytes:
    """A WAV file around raw sample bytes; `data_size` overrides the declared size."""
    raw = samples.tobytes()
    size = len(raw) if data_size is None else data_size
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    header = b"RIFF" + struct.pack("<I", (36 + size) & 0xFFFFFFFF) + b"WAVE"
    header += b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", size)
    return header + raw


def pcm16(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, -1, 1) * 32767).astype("<i2")


def encode(
    samples: np.ndarray,
    rate: int,
    container: str,
    codec: str,
    *,
    layout: str = "mono",
    options: dict[str, str] | None = None,
) -> bytes:
    """Encode (channels, n) or (n,) float samples with PyAV."""
    planes = np.ascontiguousarray(np.atleast_2d(samples), dtype=np.float32)
    buf = io.BytesIO()
    with av.open(buf, "w", format=container, options=options or {}) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(planes, format="fltp", layout=layout)
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=stream.format.name, layout=layout, rate=rate)
        for converted in resampler.resample(frame):
            converted.pts = None
            out.mux(stream.encode(converted))
        out.mux(stream.encode(None))
    return buf.getvalue()


# --- WAV, parsed natively -----------------------------------------------------------------------


def test_wav_pcm16_at_16k_is_returned_sample_exact() -> None:
    x = tone(440, 0.5, 16_000)
    out = decode_audio(wav_bytes(pcm16(x), 16_000), **LIMITS)
    assert out.dtype == np.float32 and out.ndim == 1
    np.testing.assert_allclose(out, pcm16(x) / 32768.0, atol=1e-7)


def test_wav_with_streaming_placeholder_sizes_decodes_what_is_there() -> None:
    x = tone(300, 1.0, 22_050)
    data = wav_bytes(pcm16(x), 22_050, data_size=0x7FFFF000)  # what espeak-ng writes
    out = decode_audio(data, **LIMITS)
    assert len(out) == pytest.approx(16_000, abs=2)
    assert dominant_hz(out) == pytest.approx(300, abs=2)


def test_espeak_ng_wav_decodes() -> None:
    data = espeak_wav("hello there")
    assert struct.unpack_from("<I", data, 40)[0] >= 0x7F000000  # really a placeholder
    samples = (len(data) - 44) // 2
    out = decode_audio(data, **LIMITS)
    assert len(out) == pytest.approx(samples * 16_000 / 22_050, abs=2)
    assert np.abs(out).max() > 0.05


@pytest.mark.parametrize(
    ("tag", "bits", "dtype", "scale", "offset"),
    [
        (1, 8, np.uint8, 127, 128),
        (1, 16, "<i2", 32767, 0),
        (1, 32, "<i4", 2**31 - 1, 0),
        (3, 32, "<f4", 1, 0),
        (3, 64, "<f8", 1, 0),
    ],
)
def test_wav_sample_formats(tag: int, bits: int, dtype, scale: float, offset: int) -> None:
    x = tone(1000, 0.25, 16_000, amp=0.5)
    raw = (x.astype(np.float64) * scale + offset).round().astype(dtype) if tag == 1 else x
    out = decode_audio(
        wav_bytes(np.asarray(raw).astype(dtype), 16_000, tag=tag, bits=bits), **LIMITS
    )
    np.testing.assert_allclose(out, x, atol=1.5 / 128 if bits == 8 else 1e-4)


def test_wav_24_bit_negative_values() -> None:
    ints = np.array([-(2**23), -1, 0, 1, 2**23 - 1], dtype=np.int32)
    raw = np.stack([(ints >> s) & 0xFF for s in (0, 8, 16)], axis=1).astype(np.uint8)
    out = decode_audio(wav_bytes(raw, 16_000, bits=24), **LIMITS)
    np.testing.assert_allclose(out, ints / 2**23, atol=1e-7)


def test_wav_stereo_is_averaged_not_summed() -> None:
    left = tone(500, 0.5, 16_000, amp=0.8)
    stereo = np.stack([left, left], axis=1)  # identical channels: mono must equal one channel
    out = decode_audio(wav_bytes(pcm16(stereo), 16_000, channels=2), **LIMITS)
    np.testing.assert_allclose(out, pcm16(left) / 32768.0, atol=1e-4)
    opposite = np.stack([left, -left], axis=1)
    out = decode_audio(wav_bytes(pcm16(opposite), 16_000, channels=2), **LIMITS)
    assert np.abs(out).max() < 1e-3


def test_mulaw_wav_goes_through_ffmpeg() -> None:
    data = encode(tone(700, 0.5, 8_000), 8_000, "wav", "pcm_mulaw")
    assert struct.unpack_from("<H", data, 20)[0] == 7  # really μ-law
    out = decode_audio(data, **LIMITS)
    assert len(out) == pytest.approx(8_000, abs=40)
    assert dominant_hz(out) == pytest.approx(700, abs=3)


def test_truncated_wav_with_a_real_size_is_unreadable() -> None:
    data = wav_bytes(pcm16(tone(440, 1.0, 16_000)), 16_000)
    with pytest.raises(AudioUnreadable, match="truncated WAV"):
        decode_audio(data[: len(data) // 2], **LIMITS)
    with pytest.raises(AudioUnreadable, match="fmt chunk"):
        decode_audio(data[:30], **LIMITS)


def test_wav_without_data_or_samples_is_unreadable() -> None:
    data = wav_bytes(pcm16(tone(440, 0.1, 16_000)), 16_000)
    with pytest.raises(AudioUnreadable, match="no data chunk"):
        decode_audio(data[:36], **LIMITS)
    with pytest.raises(AudioUnreadable, match="no audio samples"):
        decode_audio(wav_bytes(np.zeros(0, "<i2"), 16_000), **LIMITS)


def test_float_wav_with_nan_is_unreadable() -> None:
    x = tone(440, 0.1, 16_000)
    x[10] = np.nan
    with pytest.raises(AudioUnreadable, match="NaN"):
        decode_audio(wav_bytes(x, 16_000, tag=3, bits=32), **LIMITS)


# --- resampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100, 48_000])
def test_resampling_keeps_length_and_pitch(rate: int) -> None:
    out = resample_mono(tone(1234, 2.0, rate), rate)
    assert len(out) == pytest.approx(32_000, abs=2)
    assert dominant_hz(out) == pytest.approx(1234, abs=1)


def test_resampling_filters_what_16k_cannot_hold() -> None:
    """A 11 kHz tone at 48 kHz would alias to 5 kHz with naive decimation; it must vanish."""
    kept = resample_mono(tone(6_000, 1.0, 48_000), 48_000)
    removed = resample_mono(tone(11_000, 1.0, 48_000), 48_000)
    assert np.sqrt(np.mean(kept[1000:-1000] ** 2)) > 0.3
    assert np.sqrt(np.mean(removed[1000:-1000] ** 2)) < 0.01


# --- compressed formats -------------------------------------------------------------------------

FORMATS = [
    ("webm", "libopus", 48_000, "webm"),
    ("ogg", "libopus", 48_000, "ogg"),
    ("mp3", "libmp3lame", 44_100, "mp3"),
    ("ipod", "aac", 44_100, "mp4"),
    ("adts", "aac", 44_100, "aac"),
    ("flac", "flac", 44_100, "flac"),
]


@pytest.mark.parametrize(("container", "codec", "rate", "sniffed"), FORMATS)
def test_compressed_formats_decode(container: str, codec: str, rate: int, sniffed: str) -> None:
    data = encode(tone(440, 1.0, rate), rate, container, codec)
    assert sniff_format(data) == sniffed
    out = decode_audio(data, **LIMITS)
    assert len(out) / 16_000 == pytest.approx(1.0, abs=0.08)  # codec priming/padding
    assert dominant_hz(out) == pytest.approx(440, abs=2)
    assert 0.3 < np.abs(out).max() <= 1.0


def test_fragmented_mp4_like_safari_records_decodes() -> None:
    options = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
    data = encode(tone(440, 2.0, 48_000), 48_000, "mp4", "aac", options=options)
    assert b"moof" in data
    out = decode_audio(data, **LIMITS)
    assert len(out) / 16_000 == pytest.approx(2.0, abs=0.08)
    assert dominant_hz(out) == pytest.approx(440, abs=2)


def test_stereo_opus_is_downmixed_by_averaging() -> None:
    left = tone(440, 1.0, 48_000, amp=0.6)
    data = encode(np.stack([left, left]), 48_000, "webm", "libopus", layout="stereo")
    out = decode_audio(data, **LIMITS)
    assert np.abs(out).max() == pytest.approx(0.6, abs=0.06)  # not 0.6·√2


@pytest.mark.parametrize(("container", "codec"), [("webm", "libopus"), ("ogg", "libopus")])
def test_truncated_containers_are_unreadable(container: str, codec: str) -> None:
    data = encode(tone(440, 2.0, 48_000), 48_000, container, codec)
    for cut in (len(data) // 2, len(data) // 10, 200):
        with pytest.raises(AudioUnreadable):
            decode_audio(data[:cut], **LIMITS)


@pytest.mark.parametrize(
    ("container", "codec", "rate"),
    [("ipod", "aac", 44_100), ("flac", "flac", 44_100), ("adts", "aac", 44_100)],
)
def test_truncated_files_are_unreadable(container: str, codec: str, rate: int) -> None:
    data = encode(tone(440, 2.0, rate), rate, container, codec)
    with pytest.raises(AudioUnreadable):
        decode_audio(data[: len(data) // 2], **LIMITS)


def test_corrupt_webm_is_unreadable_with_a_precise_message() -> None:
    data = bytearray(encode(tone(440, 2.0, 48_000), 48_000, "webm", "libopus"))
    middle = len(data) // 3
    data[middle : middle + 2000] = np.random.default_rng(1).bytes(2000)
    with pytest.raises(AudioUnreadable, match=r"webm: truncated or corrupt, decoded [\d.]+ s"):
        decode_audio(bytes(data), **LIMITS)


def test_corrupt_aac_reports_codec_and_position() -> None:
    data = bytearray(encode(tone(440, 2.0, 44_100), 44_100, "ipod", "aac"))
    middle = len(data) // 2
    data[middle : middle + 500] = bytes(500)
    with pytest.raises(AudioUnreadable, match=r"mp4: corrupt aac data near [\d.]+ s"):
        decode_audio(bytes(data), **LIMITS)


def test_container_without_audio_track_is_unsupported() -> None:
    buf = io.BytesIO()
    with av.open(buf, "w", format="webm") as out:
        stream = out.add_stream("libvpx", rate=10)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for _ in range(2):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with pytest.raises(UnsupportedMedia, match="video but no audio"):
        decode_audio(buf.getvalue(), **LIMITS)


def test_audio_codec_outside_the_allowlist_is_unsupported() -> None:
    data = encode(tone(440, 0.5, 48_000), 48_000, "matroska", "ac3")
    with pytest.raises(UnsupportedMedia, match="codec 'ac3'"):
        decode_audio(data, **LIMITS)


# --- not audio at all ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(64), "PNG"),
        (b"\xff\xd8\xff\xe0" + bytes(64), "JPEG"),
        (b"GIF89a" + bytes(64), "GIF"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(64), "WEBP"),
        (b"%PDF-1.7\n" + bytes(64), "PDF"),
        (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "SVG"),
        (b"<!doctype html><html><body>hi</body></html>", "HTML"),
        ("just some text, ünïcode too\n".encode(), "text"),
        # an HLS playlist must never reach FFmpeg's playlist demuxer (it opens other files)
        (b"#EXTM3U\n#EXTINF:10,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n", "text"),
        (np.random.default_rng(2).bytes(4096)[1:], "unrecognized"),
    ],
)
def test_non_audio_is_unsupported(data: bytes, what: str) -> None:
    with pytest.raises(UnsupportedMedia, match=what):
        decode_audio(data, **LIMITS)


def test_empty_bytes_are_unreadable() -> None:
    with pytest.raises(AudioUnreadable, match="empty"):
        decode_audio(b"", **LIMITS)


# --- limits -------------------------------------------------------------------------------------


def test_byte_limit_is_checked_before_parsing() -> None:
    data = wav_bytes(pcm16(tone(440, 1.0, 16_000)), 16_000)
    with pytest.raises(AudioTooLong, match=f"{len(data)} bytes, over the 1000-byte limit"):
        decode_audio(data, max_seconds=60, max_bytes=1000)
    with pytest.raises(AudioTooLong, match="bytes"):
        decode_audio(b"\x89PNG" + bytes(2000), max_seconds=60, max_bytes=1000)


def test_ten_minute_wav_is_rejected_from_its_size_without_converting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    converted = count_conversions(monkeypatch)
    data = wav_bytes(np.zeros(600 * 16_000, "<i2"), 16_000)
    with pytest.raises(AudioTooLong, match=r"600\.0 s long, over the 60 s limit"):
        decode_audio(data, max_seconds=60, max_bytes=10**9)
    assert converted == []
    # The spy does see a conversion when one happens.
    decode_audio(wav_bytes(np.zeros(16_000, "<i2"), 16_000), max_seconds=60, max_bytes=10**9)
    assert converted == [16_000]


def opus_repeated(seconds: int, container: str, options: dict[str, str] | None = None) -> bytes:
    """`seconds` of Opus built by re-muxing one encoded second (cheap: no encoding)."""
    noise = (np.random.default_rng(3).standard_normal(48_000) * 0.1).astype(np.float32)
    one = encode(noise, 48_000, "ogg", "libopus")
    with av.open(io.BytesIO(one)) as src:
        in_stream = src.streams.audio[0]
        packets = [p for p in src.demux(in_stream) if p.size]
        buf = io.BytesIO()
        with av.open(buf, "w", format=container, options=options or {}) as out:
            out_stream = out.add_stream_from_template(in_stream)
            pts = 0
            for _ in range(seconds):
                for packet in packets:
                    packet.stream = out_stream
                    packet.pts = packet.dts = pts
                    pts += packet.duration
                    out.mux(packet)
    return buf.getvalue()


@pytest.fixture(scope="module")
def live_webm_10min() -> bytes:
    """Like a browser's MediaRecorder: WebM written live, no duration in the header."""
    return opus_repeated(600, "webm", {"live": "1"})


class CountingBytesIO(io.BytesIO):
    bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        CountingBytesIO.bytes_read += len(chunk)
        return chunk


def test_long_stream_stops_decoding_at_the_limit(
    live_webm_10min: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    CountingBytesIO.bytes_read = 0
    monkeypatch.setattr(audio_decode, "BytesIO", CountingBytesIO)
    with pytest.raises(AudioTooLong, match=r"stopped decoding at 60\.\d s"):
        decode_audio(live_webm_10min, max_seconds=60, max_bytes=10**8)
    # 60 of 600 s: about a tenth of the file was read, not all of it
    assert 0 < CountingBytesIO.bytes_read < 0.2 * len(live_webm_10min)


def test_long_ogg_is_rejected_from_its_declared_duration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    converted = count_conversions(monkeypatch)
    data = opus_repeated(300, "ogg")
    with pytest.raises(AudioTooLong, match="declares"):
        decode_audio(data, max_seconds=60, max_bytes=10**8)
    assert converted == []  # refused before a single frame was decoded
    decode_audio(opus_repeated(2, "ogg"), max_seconds=60, max_bytes=10**8)
    assert sum(converted) / 16_000 == pytest.approx(2.0, abs=0.08)  # the spy sees decoding


def _patch_webm_duration(data: bytes, ms: float) -> bytes:
    at = data.find(b"\x44\x89\x88")  # Segment Info / Duration, 8-byte float, milliseconds
    assert at > 0
    return data[: at + 3] + struct.pack(">d", ms) + data[at + 11 :]


def test_webm_claiming_a_huge_duration_is_rejected_without_decoding() -> None:
    data = _patch_webm_duration(encode(tone(440, 1.0, 48_000), 48_000, "webm", "libopus"), 1e12)
    with pytest.raises(AudioTooLong, match="declares"):
        decode_audio(data, **LIMITS)


def test_webm_claiming_a_short_duration_is_not_trusted() -> None:
    data = _patch_webm_duration(opus_repeated(120, "webm"), 1000.0)
    with pytest.raises(AudioTooLong, match="stopped decoding"):
        decode_audio(data, max_seconds=60, max_bytes=10**8)


# --- raw PCM from a microphone stream -----------------------------------------------------------


def test_pcm16_mono_16k() -> None:
    x = pcm16(tone(440, 0.5, 16_000))
    out = decode_pcm16(x.tobytes(), 16_000, **LIMITS)
    np.testing.assert_allclose(out, x / 32768.0, atol=1e-7)


def test_pcm16_stereo_48k() -> None:
    x = tone(440, 1.0, 48_000)
    out = decode_pcm16(pcm16(np.stack([x, x], axis=1)).tobytes(), 48_000, 2, **LIMITS)
    assert len(out) == pytest.approx(16_000, abs=2)
    assert dominant_hz(out) == pytest.approx(440, abs=1)


def test_pcm16_errors() -> None:
    one_second = bytes(32_000)
    with pytest.raises(AudioUnreadable, match="empty"):
        decode_pcm16(b"", 16_000, **LIMITS)
    with pytest.raises(AudioUnreadable, match="whole number"):
        decode_pcm16(bytes(7), 16_000, 2, **LIMITS)
    with pytest.raises(UnsupportedMedia, match="sample rate"):
        decode_pcm16(one_second, 100, **LIMITS)
    with pytest.raises(UnsupportedMedia, match="channels"):
        decode_pcm16(one_second, 16_000, 0, **LIMITS)
    with pytest.raises(AudioTooLong, match="bytes"):
        decode_pcm16(one_second, 16_000, max_seconds=60, max_bytes=100)
    with pytest.raises(AudioTooLong, match=r"1\.0 s long, over the 0.5 s limit"):
        decode_pcm16(one_second, 16_000, max_seconds=0.5, max_bytes=10**6)


def test_flac_with_tags_that_are_not_utf8_is_unreadable() -> None:
    """PyAV decodes a file's tags as UTF-8 when it opens it (found by the media fuzzer)."""
    data = encode(tone(440, 0.5, 44_100), 44_100, "flac", "flac")
    assert b"encoder=Lavf" in data
    hostile = data.replace(b"encoder=Lavf", b"encoder=\xff\xff\xff\xff", 1)
    with pytest.raises(AudioUnreadable, match="not UTF-8"):
        decode_audio(hostile, **LIMITS)
