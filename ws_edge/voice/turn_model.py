"""The audio turn model: Smart Turn v3.2 (ONNX, ~8.7 MB, BSD-2, 23 languages) saying whether
the user finished speaking, from the sound of the utterance so far (words, intonation, pace).

The weights ship inside the `pipecat-ai` wheel (installed without its dependencies: only the
file is used); the model reads Whisper log-mel features of the last 8 s (`log_mel`). One
session per edge process, shared by every voice loop; a verdict costs ~60 ms of one core,
and only at a pause (not per frame), so a small pool of threads runs them off the event
loop. When every thread is busy and `max_waiting` verdicts queue, a pause gets no verdict
(None: the silence rule decides it) rather than a late one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ws_edge.errors import TurnModelUnavailable
from ws_edge.voice.log_mel import SAMPLE_RATE, log_mel, pcm16_tail
from ws_edge.voice.model_threads import ModelThreads

WINDOW_SAMPLES = 8 * SAMPLE_RATE
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"


def bundled_model_path() -> Path:
    """Where the pipecat-ai wheel keeps the model (found without importing pipecat)."""
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise TurnModelUnavailable("the turn model needs the pipecat-ai package (infra/setup.sh)")
    path = Path(next(iter(spec.submodule_search_locations))) / "audio/turn/smart_turn/data"
    path /= MODEL_FILE
    if not path.is_file():
        raise TurnModelUnavailable(f"turn model file missing: {path}")
    return path


def model_input(pcm: bytes) -> np.ndarray:
    """(1, 80, 800) features of the last 8 s of PCM16 16 kHz audio, silence-padded in front."""
    samples = pcm16_tail(pcm, WINDOW_SAMPLES)
    audio = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if len(samples):
        audio[-len(samples) :] = samples
    return log_mel(audio)[None]


class TurnModel:
    """Blocking: `probability` runs the model (call it in a thread)."""

    def __init__(self, path: Path | None = None, *, threads: int = 1) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise TurnModelUnavailable("the turn model needs onnxruntime") from exc
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session: Any = onnxruntime.InferenceSession(
            str(path or bundled_model_path()),
            sess_options=options,
            providers=["CPUExecutionProvider"],
        )

    def probability(self, pcm: bytes) -> float:
        """P(the user finished) after the utterance `pcm` (PCM16 16 kHz mono, with the silence
        heard so far)."""
        [out] = self._session.run(None, {"input_features": model_input(pcm)})
        return float(np.asarray(out).ravel()[0])


class TurnJudge:
    """The edge's verdicts: one model, loaded on first use, a few threads, a bounded queue."""

    def __init__(
        self, *, threads: int = 1, max_waiting: int = 8, load: Callable[[], Any] = TurnModel
    ) -> None:
        self._threads = ModelThreads(
            load,  # ~0.2 s, once, in the pool's thread
            TurnModelUnavailable,
            threads=threads,
            max_waiting=max_waiting,
            what="turn model",
        )

    async def probability(self, pcm: bytes) -> float | None:
        """P(complete), or None when too many verdicts already wait (overload: silence
        decides). Raises `TurnModelUnavailable` when the model cannot run."""
        return await self._threads.run(lambda model, pcm: model.probability(pcm), pcm)

    def close(self) -> None:
        self._threads.close()
