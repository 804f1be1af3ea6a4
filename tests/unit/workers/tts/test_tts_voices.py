"""Speech out voices on the real engines (Piper with the bundled joe voice, the espeak-ng
binary): audio format and length, untrusted text (options, raw phonemes, emoji, NULs), the WAV
parser's placeholder sizes, the voice book, and one round trip through Whisper."""

from __future__ import annotations

import struct
import threading

import pytest

from workers.tts.errors import SpeechError, SynthesisFailed, TextTooLong, UnknownVoice
from workers.tts.voices import (
    DEFAULT_VOICE,
    MAX_TEXT_CHARS,
    VOICES,
    Audio,
    EspeakSpeaker,
    PiperSpeaker,
    Voice,
    VoiceBook,
    WavFormat,
    parse_streamed_wav,
    prepare_text,
)

# piper, the joe voice and espeak-ng are installed by infra/setup.sh: no skips, a missing
# one is a failed setup

HELLO = "Hello there, how are you?"


@pytest.fixture(scope="module")
def book() -> VoiceBook:
    return VoiceBook()  # one Piper load for the whole module


def peak(audio: Audio) -> int:
    samples = struct.unpack(f"<{audio.samples}h", audio.pcm)
    return max((abs(s) for s in samples), default=0)


# --- each voice -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VOICES))
def test_voice_speaks_a_sentence_as_s16_mono(book: VoiceBook, name: str) -> None:
    voice = book.get(name)
    assert isinstance(voice, Voice)
    assert voice.name == name
    assert voice.sample_rate == 22_050
    audio = voice.synthesize(HELLO)
    assert audio.sample_rate == voice.sample_rate
    assert audio.pcm and len(audio.pcm) % 2 == 0
    assert 500 < audio.duration_ms < 5000  # the length of the audio, not the time it took
    assert peak(audio) > 3000  # speech, not silence


@pytest.mark.parametrize("name", sorted(VOICES))
@pytest.mark.parametrize("text", ["--help", "-v xx", "--version -w /tmp/x.wav"])
def test_option_like_text_is_spoken_not_parsed(book: VoiceBook, name: str, text: str) -> None:
    audio = book.get(name).synthesize(text)
    # espeak-ng's help text on stdout would fail the WAV parse; a spoken "help" takes time
    assert audio.duration_ms > 200
    assert peak(audio) > 1000


@pytest.mark.parametrize("name", sorted(VOICES))
@pytest.mark.parametrize(
    "text",
    ["😀🎉", "你好\uff0c世界", "Café 😀 ok 你好", "a\x00b\x07c", "lone \ud800 surrogate", "…"],
)
def test_unspeakable_characters_do_not_raise(book: VoiceBook, name: str, text: str) -> None:
    audio = book.get(name).synthesize(text)
    assert audio.sample_rate == 22_050
    assert len(audio.pcm) % 2 == 0  # may be empty, may spell the characters out


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "\x00"])
def test_empty_text_is_empty_audio_without_the_engine(text: str) -> None:
    # a binary that does not exist and a model never loaded: the engines are not touched
    espeak = EspeakSpeaker(binary="espeak-ng-not-installed")
    assert espeak.synthesize(text) == Audio(b"", 22_050)
    piper = VOICES["joe"]()
    assert isinstance(piper, PiperSpeaker)
    assert piper.synthesize(text) == Audio(b"", 22_050)
    assert not piper.loaded


def test_duration_ms() -> None:
    assert Audio(b"\x00\x00" * 22_050, 22_050).duration_ms == 1000.0
    assert Audio(b"", 16_000).duration_ms == 0.0


def test_longer_text_is_longer_audio(book: VoiceBook) -> None:
    joe = book.get("joe")
    short = joe.synthesize("Hi there.")
    long = joe.synthesize("Hi there. This is a second sentence, and a third one follows it.")
    assert long.duration_ms > 2 * short.duration_ms  # every sentence's chunk is kept


def test_piper_options_change_the_speed() -> None:
    make = VOICES["joe"]
    normal = make().synthesize(HELLO)
    fast = PiperSpeaker(make().model_path, length_scale=0.6).synthesize(HELLO)
    assert fast.duration_ms < 0.8 * normal.duration_ms


# --- untrusted text ---------------------------------------------------------------------------


def test_prepare_text() -> None:
    assert prepare_text("  hi \x00there\x1b ") == "hi  there"
    assert prepare_text("a\nb\tc") == "a\nb\tc"
    assert prepare_text("x\ud800y") == "x\ufffdy"
    assert prepare_text(" " * 5000) == ""  # only the stripped text counts
    with pytest.raises(TextTooLong) as err:
        prepare_text("x" * (MAX_TEXT_CHARS + 1))
    assert err.value.code == "tts_text_too_long"
    assert not err.value.retryable


@pytest.mark.parametrize("name", sorted(VOICES))
def test_too_long_text_is_refused(book: VoiceBook, name: str) -> None:
    with pytest.raises(TextTooLong):
        book.get(name).synthesize("word " * MAX_TEXT_CHARS)


def test_piper_raw_phoneme_syntax_is_defused(book: VoiceBook) -> None:
    # "[[ QQQ ]]" would go straight to the model as phonemes (Q is not one: near-silence);
    # as text, espeak spells the letters out.
    joe = book.get("joe")
    as_text = joe.synthesize("QQQ")
    bracketed = joe.synthesize("[[ QQQ ]]")
    assert bracketed.duration_ms > 0.7 * as_text.duration_ms > 500


# --- the WAV parser ---------------------------------------------------------------------------


def streamed_wav(pcm: bytes, *, extra_chunk: bytes = b"", rate: int = 22_050) -> bytes:
    """A WAV as a pipe writer leaves it: both size fields are 0xFFFFFFFF placeholders."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + extra_chunk
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
        + pcm
    )


def test_wav_parser_ignores_placeholder_sizes() -> None:
    pcm = struct.pack("<4h", 0, 1000, -1000, 32767)
    fmt, out = parse_streamed_wav(streamed_wav(pcm))
    assert fmt == WavFormat(22_050, 1, 16)
    assert out == pcm


def test_wav_parser_skips_other_chunks_and_cuts_to_whole_frames() -> None:
    pcm = struct.pack("<3h", 1, 2, 3)
    odd_list = b"LIST" + struct.pack("<I", 3) + b"abc" + b"\x00"  # odd size: one pad byte
    fmt, out = parse_streamed_wav(streamed_wav(pcm + b"\x7f", extra_chunk=odd_list, rate=16_000))
    assert fmt.sample_rate == 16_000
    assert out == pcm  # the half sample at the end is dropped


def test_wav_parser_reads_real_espeak_output() -> None:
    import subprocess

    wav = subprocess.run(
        ["espeak-ng", "--stdout", "--stdin"], input=b"Hello.", capture_output=True, check=True
    ).stdout
    assert struct.unpack_from("<I", wav, 40)[0] != len(wav) - 44  # a placeholder indeed
    fmt, pcm = parse_streamed_wav(wav)
    assert fmt == WavFormat(22_050, 1, 16)
    assert len(pcm) == len(wav) - 44


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not a RIFF/WAVE"),
        (b"OggS" + b"\x00" * 40, "not a RIFF/WAVE"),
        (b"RIFF\xff\xff\xff\xffWAVEdata\xff\xff\xff\xff\x00\x00", "before its fmt"),
        (
            b"RIFF\xff\xff\xff\xffWAVEfmt \x10\x00\x00\x00"
            + struct.pack("<HHIIHH", 3, 1, 22_050, 88_200, 4, 32),
            "not integer PCM",
        ),
        (streamed_wav(b"")[:36], "no data chunk"),
    ],
)
def test_wav_parser_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_streamed_wav(data)


# --- engine failures --------------------------------------------------------------------------


def test_espeak_failure_is_synthesis_failed_with_the_reason() -> None:
    # (not "no-such-voice": espeak-ng falls back to its "no", Norwegian)
    with pytest.raises(SynthesisFailed, match="voice does not exist") as err:
        EspeakSpeaker("nonexistent").synthesize("hello")
    assert err.value.code == "tts_failed"
    assert err.value.retryable


def test_missing_engine_is_not_retryable(tmp_path) -> None:
    with pytest.raises(SynthesisFailed) as err:
        EspeakSpeaker(binary="espeak-ng-not-installed").synthesize("hello")
    assert not err.value.retryable
    config = tmp_path / "voice.onnx.json"
    config.write_text('{"audio": {"sample_rate": 22050}}')
    piper = PiperSpeaker(tmp_path / "voice.onnx", config_path=config)
    with pytest.raises(SynthesisFailed, match="failed to load") as err:
        piper.synthesize("hello")
    assert not err.value.retryable
    with pytest.raises(SynthesisFailed, match="config"):
        PiperSpeaker(tmp_path / "missing.onnx")


def test_espeak_voice_name_is_checked() -> None:
    with pytest.raises(ValueError):
        EspeakSpeaker("--help")


# --- the voice book ---------------------------------------------------------------------------


def test_unknown_voice_lists_the_known_ones(book: VoiceBook) -> None:
    with pytest.raises(UnknownVoice) as err:
        book.get("nobody")
    assert isinstance(err.value, SpeechError)
    assert err.value.code == "unknown_voice"
    assert not err.value.retryable
    assert "'nobody'" in err.value.message
    assert "espeak" in err.value.message and "joe" in err.value.message


def test_book_returns_one_instance_per_voice(book: VoiceBook) -> None:
    assert book.get("joe") is book.get("joe")
    assert book.get(" Joe ") is book.get("joe")  # names are case-insensitive
    assert book.get() is book.get(DEFAULT_VOICE)
    assert DEFAULT_VOICE == "joe"
    assert book.names == ("espeak", "joe")


def test_book_builds_once_under_concurrency() -> None:
    built: list[int] = []

    def factory() -> Voice:
        built.append(1)
        return EspeakSpeaker()

    book = VoiceBook({"e": factory})
    got: list[Voice] = []
    threads = [threading.Thread(target=lambda: got.append(book.get("e"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    assert all(v is got[0] for v in got)


def test_preload_loads_the_model() -> None:
    book = VoiceBook({"joe": VOICES["joe"]})
    book.preload()
    voice = book.get("joe")
    assert isinstance(voice, PiperSpeaker)
    assert voice.loaded


# --- round trip -------------------------------------------------------------------------------


def test_whisper_understands_joe(book: VoiceBook) -> None:
    from harness.media import words
    from workers.preprocess.asr import WhisperTranscriber
    from workers.preprocess.audio_decode import decode_pcm16
    from workers.preprocess.vad import SAMPLE_RATE, SpeechSegment

    # not "The capital of France is Paris.": Whisper tiny hears Joe's "France is" as "Francis"
    audio = book.get("joe").synthesize("France has its capital in Paris.")
    clip = decode_pcm16(audio.pcm, audio.sample_rate, max_seconds=30, max_bytes=10_000_000)
    transcript = WhisperTranscriber(cpu_threads=2).transcribe(
        clip, [SpeechSegment(0.0, len(clip) / SAMPLE_RATE)]
    )
    assert {"capital", "france", "paris"} <= set(words(transcript.text))


# --- a voice for the user's language ------------------------------------------------------------
def test_a_voice_that_speaks_the_language_is_kept(book: VoiceBook) -> None:
    for language in ("en", ""):  # English, or not known: the chosen voice
        assert book.speaking("joe", language) is book.get("joe")
        assert book.speaking("espeak", language) is book.get("espeak")


def test_another_language_gets_an_espeak_voice_of_it_built_once(book: VoiceBook) -> None:
    spanish = book.speaking("joe", "es")
    assert isinstance(spanish, EspeakSpeaker) and spanish.voice == "es"
    assert book.speaking("espeak", "es") is spanish  # one per language, shared
    assert spanish.synthesize("¿Dónde está la estación?").sample_rate == 22_050  # as joe's
    assert peak(spanish.synthesize("¿Dónde está la estación?")) > 1000


def test_chinese_is_read_through_pinyin(book: VoiceBook) -> None:
    chinese = book.speaking("joe", "zh")
    assert isinstance(chinese, EspeakSpeaker) and chinese.voice == "cmn-latn-pinyin"
    assert chinese.romanize is not None and chinese.romanize("你好") == "ni3 hao3"
    heard = chinese.synthesize("你好，世界。")  # noqa: RUF001
    assert peak(heard) > 1000 and heard.duration_ms > 300


def test_a_language_espeak_cannot_speak_stays_with_the_chosen_voice(book: VoiceBook) -> None:
    assert book.speaking("joe", "xx") is book.get("joe")
