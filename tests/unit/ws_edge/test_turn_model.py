"""The audio turn model's shell: its input window, the bundled model's output, the judge's
bounded queue and its in-band failure."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from harness.media import pcm16, quiet_room, spoken
from ws_edge.errors import TurnModelUnavailable
from ws_edge.voice import turn_model
from ws_edge.voice.log_mel import log_mel
from ws_edge.voice.turn_model import WINDOW_SAMPLES, TurnJudge, TurnModel, model_input


def test_model_input_keeps_the_last_8_s_and_pads_silence_in_front():
    ramp = (np.arange(10 * 16_000) % 2000 - 1000).astype("<i2")
    window = ramp[-WINDOW_SAMPLES:].astype(np.float32) / 32768.0
    np.testing.assert_array_equal(model_input(ramp.tobytes()), log_mel(window)[None])
    short = ramp[:16_000]
    front_padded = np.zeros(WINDOW_SAMPLES, np.float32)
    front_padded[-16_000:] = short.astype(np.float32) / 32768.0
    np.testing.assert_array_equal(
        model_input(short.tobytes() + b"\x01"), log_mel(front_padded)[None]
    )


def test_the_bundled_model_gives_a_deterministic_probability():
    model = TurnModel()
    question = pcm16(np.concatenate([quiet_room(0.2), spoken("What time is it?"), quiet_room(0.2)]))
    first = model.probability(question)
    assert 0.0 <= first <= 1.0
    assert model.probability(question) == first
    assert model.probability(pcm16(quiet_room(1.0))) != first  # it reads the audio


def test_a_missing_model_is_turn_model_unavailable(monkeypatch):
    monkeypatch.setattr(turn_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TurnModelUnavailable) as err:
        turn_model.bundled_model_path()
    assert err.value.code == "turn_model_unavailable"


class _Blocking:
    def __init__(self) -> None:
        self.release = threading.Event()

    def probability(self, pcm: bytes) -> float:
        self.release.wait(5)
        return 0.75


async def test_the_judge_answers_none_once_max_waiting_verdicts_queue():
    model = _Blocking()
    judge = TurnJudge(threads=1, max_waiting=2, load=lambda: model)
    first = asyncio.ensure_future(judge.probability(b"a"))
    second = asyncio.ensure_future(judge.probability(b"b"))
    await asyncio.sleep(0)
    assert await judge.probability(b"c") is None  # overloaded: the silence rule decides
    model.release.set()
    assert await first == 0.75 and await second == 0.75
    assert await judge.probability(b"d") == 0.75  # the queue drained
    judge.close()


async def test_a_failing_model_is_turn_model_unavailable():
    class Broken:
        def probability(self, pcm: bytes) -> float:
            raise RuntimeError("onnx exploded")

    judge = TurnJudge(load=Broken)
    with pytest.raises(TurnModelUnavailable, match="onnx exploded"):
        await judge.probability(b"x")
    judge.close()
