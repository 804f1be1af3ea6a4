"""The NudeNet detector's weights, run with onnxruntime: a picture in, what it shows out.

The weights (`320n.onnx`, 12 MB) ship in the `nudenet` 3.4.2 wheel. Its metadata says MIT
but the licence file inside it is the AGPL-3.0, so turnstream does not depend on it: setup
installs it `--no-deps` for the local stack (its own code needs OpenCV, which nothing here
uses; pre- and post-processing are in `nudity.py`), and a deployment that cannot take the
AGPL turns image screening off (TURNSTREAM_IMAGE_SAFETY=off) or loads other weights from
TURNSTREAM_IMAGE_SAFETY_MODEL_PATH. The weights are read from the installed package's
folder without importing it.

One thread per session: a 320 px YOLOv8n costs ~10-20 ms on one core, and the roles share
the machine's cores.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from moderation.errors import DetectorUnavailable
from moderation.nudity import INPUT_SIDE, Detection, detections, letterbox

WEIGHTS_FILE = "320n.onnx"


def bundled_weights() -> Path:
    """Where the installed `nudenet` package keeps its weights (not imported: it needs cv2)."""
    spec = importlib.util.find_spec("nudenet")
    if spec is None or not spec.submodule_search_locations:
        raise DetectorUnavailable(
            "image screening needs the NudeNet weights: install them with "
            "`pip install --no-deps nudenet==3.4.2` (AGPL-3.0; see docs/safety.md), "
            "or set TURNSTREAM_IMAGE_SAFETY=off"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE
    if not path.is_file():
        raise DetectorUnavailable(f"the nudenet package has no {WEIGHTS_FILE} at {path}")
    return path


@dataclass
class NudityModel:
    """One onnxruntime session over the detector; `detect` is blocking (call it in a thread)
    and safe to call from several threads (one run at a time)."""

    path: Path
    threads: int = 1
    _session: object = field(init=False, repr=False)
    _input: str = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # a corrupt or foreign file: say which
            raise DetectorUnavailable(f"cannot load the image detector {self.path}: {err}") from err
        self._input = self._session.get_inputs()[0].name  # type: ignore[attr-defined]

    @classmethod
    def load(cls, path: str = "", threads: int = 1) -> NudityModel:
        return cls(Path(path) if path else bundled_weights(), threads)

    def detect(self, image: Image.Image | np.ndarray) -> list[Detection]:
        rgb = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image)
        blob, scale = letterbox(rgb, INPUT_SIDE)
        with self._lock:
            (output,) = self._session.run(None, {self._input: blob})  # type: ignore[attr-defined]
        height, width = rgb.shape[:2]
        return detections(output[0], scale=scale, width=width, height=height)
