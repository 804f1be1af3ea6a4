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

import asyncio
import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ws_edge.errors import TurnModelUnavailable
from ws_edge.voice.log_mel import SAMPLE_RATE, log_mel

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
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")[-WINDOW_SAMPLES:]
    audio = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if len(samples):
        audio[-len(samples) :] = samples.astype(np.float32) / 32768.0
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

    def __init__(self, *, threads: int = 1, max_waiting: int = 8) -> None:
        self._threads = threads
        self._max_waiting = max_waiting
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="turn-model")
        self._model: TurnModel | None = None
        self._loading = threading.Lock()
        self._waiting = 0

    def _probability(self, pcm: bytes) -> float:
        with self._loading:  # several threads: the model is built once
            if self._model is None:
                self._model = TurnModel()  # ~0.2 s, once, in the pool's thread
        return self._model.probability(pcm)

    async def probability(self, pcm: bytes) -> float | None:
        """P(complete), or None when too many verdicts already wait (overload: silence
        decides). Raises `TurnModelUnavailable` when the model cannot run."""
        if self._waiting >= self._max_waiting:
            return None
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._probability, pcm)
        except TurnModelUnavailable:
            raise
        except Exception as exc:
            raise TurnModelUnavailable(f"turn model failed: {exc}") from exc
        finally:
            self._waiting -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
