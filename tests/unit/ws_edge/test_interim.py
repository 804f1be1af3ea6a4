"""Interim transcripts' reader: the deployment's Whisper on the first seconds of a spoken
question (tiny.en, as a default deployment runs; the multilingual base with a language the
client names), the window it reads in, and the transcriber's failure and bounded queue."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from harness.media import pcm16, quiet_room, spoken, voiced, words
from runtime.settings import Settings
from runtime.whisper_models import asr_model_path, tiny_en_path
from workers.tts.voices import espeak_for
from ws_edge.errors import InterimTranscriberUnavailable
from ws_edge.voice.interim import InterimReader, InterimTranscriber, window_for


def test_an_utterance_is_read_in_the_smallest_window_that_holds_it():
    assert window_for(2.0) == 10
    assert window_for(8.5) == 10 and window_for(8.6) == 20
    assert window_for(18.6) == 30  # too long for a short window: Whisper's own


def test_the_words_so_far_of_a_question_in_english():
    reader = InterimReader(tiny_en_path())
    question = spoken("Could you tell me about the tallest mountains in the world?")
    so_far = pcm16(np.concatenate([quiet_room(0.2), question[: 2 * 16_000]]))  # its first 2 s
    heard = reader.read(so_far)
    assert heard.language == "en" and heard.language_probability == 1.0  # English-only
    assert heard.logprob > -0.8  # sure enough to be shown (`unfinished.unreadable`)
    assert {"tell", "tallest"} <= set(words(heard.text)), heard
    assert "world" not in words(heard.text)  # not said yet


def test_the_multilingual_model_reads_in_the_language_the_client_names():
    reader = InterimReader(asr_model_path("multilingual", Settings().state_path / "models"))
    said = voiced(espeak_for("es"), "Quiero reservar una mesa para cuatro personas esta noche.")
    heard = reader.read(pcm16(np.concatenate([quiet_room(0.2), said])), "es")
    assert heard.language == "es"
    assert {"reservar", "mesa", "personas"} <= set(words(heard.text)), heard


async def test_a_transcriber_that_cannot_load_says_so_and_a_full_queue_skips():
    def broken():
        raise OSError("no model here")

    failing = InterimTranscriber(Settings().state_path / "models", "tiny.en", load=broken)
    with pytest.raises(InterimTranscriberUnavailable, match="interim transcriber failed"):
        await failing.read(b"\x00\x00" * 1600)
    failing.close()

    release = threading.Event()

    class Slow:
        def read(self, pcm: bytes, language: str = ""):
            release.wait(5)
            return "read"

    busy = InterimTranscriber(Settings().state_path / "models", "tiny.en", load=Slow, max_waiting=1)
    first = asyncio.ensure_future(busy.read(b"\x00\x00"))
    await asyncio.sleep(0.05)
    assert await busy.read(b"\x00\x00") is None  # one already waits: skipped, not queued
    release.set()
    assert await first == "read"
    busy.close()
