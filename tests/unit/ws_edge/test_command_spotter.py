"""The short-command spotter: the bundled Whisper base on synthetic speech (a command heard as
one, a backchannel not, a language the client names), its window, and the judge's bounded
queue and failure."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from harness.media import pcm16, quiet_room, voiced
from runtime.settings import Settings
from workers.tts.voices import espeak_for
from ws_edge.errors import CommandSpotterUnavailable
from ws_edge.voice.command_spotter import CommandJudge, CommandSpotter, Heard


@pytest.fixture(scope="module")
def spotter() -> CommandSpotter:
    return CommandSpotter(Settings().state_path / "models")


def said(voice, text: str) -> bytes:
    """What the edge hands the spotter: the pad, the words, 96 ms of silence."""
    return pcm16(np.concatenate([quiet_room(0.2), voiced(voice, text), quiet_room(0.1)]))


def test_a_stop_is_a_command_and_a_yeah_is_not(spotter: CommandSpotter):
    english = espeak_for("en")  # deterministic (piper's voices vary from run to run)
    stop = spotter.hear(said(english, "Stop."))
    assert stop.command, stop
    assert stop.language == "en"
    yeah = spotter.hear(said(english, "Yeah."))
    assert not yeah.command, yeah


def test_the_clients_language_is_decoded_in(spotter: CommandSpotter):
    heard = spotter.hear(said(espeak_for("es"), "Espera."), "es")
    assert heard.language == "es"
    assert heard.command, heard


def test_only_the_last_window_is_read(spotter: CommandSpotter):
    english = espeak_for("en")
    # a long sentence, then "stop": the spotter reads the last 3 s, the command in them
    sentence = voiced(english, "The weather was fine all week long and then it rained")
    heard = spotter.hear(
        pcm16(np.concatenate([sentence, quiet_room(3.0)])) + said(english, "Stop.")
    )
    assert heard.command, heard


class _Blocking:
    def __init__(self) -> None:
        self.release = threading.Event()

    def hear(self, pcm: bytes, language: str = "") -> Heard:
        self.release.wait(5)
        return Heard("stop", "en", True)


async def test_the_judge_answers_none_once_max_waiting_checks_queue():
    model = _Blocking()
    judge = CommandJudge(Path("unused"), max_waiting=2, load=lambda: model)
    first = asyncio.ensure_future(judge.verdict(b"a"))
    second = asyncio.ensure_future(judge.verdict(b"b"))
    await asyncio.sleep(0)
    assert await judge.verdict(b"c") is None  # overloaded: the duration rule decides
    model.release.set()
    assert await first is True and await second is True
    judge.close()


async def test_a_missing_model_is_command_spotter_unavailable(tmp_path, monkeypatch):
    from runtime import whisper_models

    monkeypatch.setattr(whisper_models.importlib.util, "find_spec", lambda name: None)
    judge = CommandJudge(tmp_path)
    with pytest.raises(CommandSpotterUnavailable) as err:
        await judge.verdict(b"\x00\x00" * 1600)
    assert err.value.code == "command_spotter_unavailable"
    judge.close()
