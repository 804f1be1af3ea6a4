"""What an image shows, from the NudeNet detector's raw output to a decision: pure numpy.

The detector (`nudity_model.NudityModel`) is a YOLOv8n that takes a 320 x 320 RGB square and
answers (1, 4 + 18, 2100): per anchor a box (centre x, centre y, width, height, in input
pixels) and one score per class. Here: the square it takes (`letterbox`), the boxes it
found (`detections`, with non-maximum suppression per class), and what they mean for a
turn (`judge`): exposed genitals, breasts, buttocks or anus stop the image; covered body
parts, faces and feet are recorded, never acted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The detector's classes, in its output order (NudeNet 3.4's `__labels`).
CLASSES: tuple[str, ...] = (
    "FEMALE_GENITALIA_COVERED",
    "FACE_FEMALE",
    "BUTTOCKS_EXPOSED",
    "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED",
    "MALE_BREAST_EXPOSED",
    "ANUS_EXPOSED",
    "FEET_EXPOSED",
    "BELLY_COVERED",
    "FEET_COVERED",
    "ARMPITS_COVERED",
    "ARMPITS_EXPOSED",
    "FACE_MALE",
    "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED",
    "ANUS_COVERED",
    "FEMALE_BREAST_COVERED",
    "BUTTOCKS_COVERED",
)

# What stops an image: sexual nudity. A bare male chest, a belly or feet do not.
EXPLICIT: frozenset[str] = frozenset(
    {
        "FEMALE_GENITALIA_EXPOSED",
        "MALE_GENITALIA_EXPOSED",
        "FEMALE_BREAST_EXPOSED",
        "ANUS_EXPOSED",
        "BUTTOCKS_EXPOSED",
    }
)

LABEL = "sexual_image"  # the safety label a stopped image carries (replies.py has its text)
INPUT_SIDE = 320
MIN_SCORE = 0.2  # a detection at all (NudeNet's own cut)
BLOCK_SCORE = 0.45  # an explicit detection that stops the image
NMS_IOU = 0.45


@dataclass(frozen=True, slots=True)
class Detection:
    label: str
    score: float
    box: tuple[float, float, float, float]  # x, y, width, height in the source image's pixels


@dataclass(frozen=True, slots=True)
class ImageJudgement:
    blocked: bool
    labels: tuple[str, ...]  # the explicit classes that stopped it (empty when allowed)
    scores: dict[str, float]  # the best score per class found, for the trace


def letterbox(rgb: np.ndarray, side: int = INPUT_SIDE) -> tuple[np.ndarray, float]:
    """An (H, W, 3) uint8 RGB image → the detector's (1, 3, side, side) float32 input in [0, 1],
    the image padded black on the right and bottom to a square first (as NudeNet does), and
    the factor from input pixels back to source pixels. RGB, as YOLOv8 trains: NudeNet's
    own code ends up feeding BGR (docs/safety.md#images), which scores a real face lower."""
    from PIL import Image

    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"letterbox takes (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}")
    height, width = rgb.shape[:2]
    square = max(height, width)
    padded = np.zeros((square, square, 3), dtype=np.uint8)
    padded[:height, :width] = rgb
    resized = Image.fromarray(padded).resize((side, side), Image.Resampling.BILINEAR)
    chw = np.asarray(resized, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return np.ascontiguousarray(chw[None]), square / side


def detections(
    output: np.ndarray,
    *,
    scale: float,
    width: int,
    height: int,
    min_score: float = MIN_SCORE,
    iou: float = NMS_IOU,
) -> list[Detection]:
    """The boxes in one image's raw output (4 + classes, anchors), best first, boxes in the
    source image's pixels (clipped to it), overlapping boxes of a class suppressed."""
    rows = np.asarray(output, dtype=np.float32).reshape(4 + len(CLASSES), -1).T
    scores = rows[:, 4:]
    best = scores.argmax(axis=1)
    best_score = scores[np.arange(len(rows)), best]
    keep = best_score >= min_score
    if not keep.any():
        return []
    boxes = _corner_boxes(rows[keep, :4] * scale, width, height)
    found = _suppress(boxes, best_score[keep], best[keep], iou)
    return [
        Detection(
            CLASSES[int(best[keep][i])],
            round(float(best_score[keep][i]), 4),
            tuple(round(float(v), 1) for v in boxes[i]),  # type: ignore[arg-type]
        )
        for i in found
    ]


def _corner_boxes(centre: np.ndarray, width: int, height: int) -> np.ndarray:
    """(cx, cy, w, h) → (x, y, w, h) from the top-left corner, clipped to the image."""
    x = np.clip(centre[:, 0] - centre[:, 2] / 2, 0, width)
    y = np.clip(centre[:, 1] - centre[:, 3] / 2, 0, height)
    w = np.minimum(centre[:, 2], width - x)
    h = np.minimum(centre[:, 3], height - y)
    return np.stack([x, y, w, h], axis=1)


def _suppress(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression within each class: indices kept, best score first."""
    order = list(np.argsort(-scores, kind="stable"))
    kept: list[int] = []
    while order:
        top = order.pop(0)
        kept.append(int(top))
        order = [
            i for i in order if classes[i] != classes[top] or _overlap(boxes[top], boxes[i]) <= iou
        ]
    return kept


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two (x, y, w, h) boxes."""
    left, top = max(a[0], b[0]), max(a[1], b[1])
    right, bottom = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    inter = max(0.0, right - left) * max(0.0, bottom - top)
    union = a[2] * a[3] + b[2] * b[3] - inter
    return float(inter / union) if union > 0 else 0.0


def judge(
    found: Sequence[Detection],
    block_score: float = BLOCK_SCORE,
    explicit: frozenset[str] = EXPLICIT,
) -> ImageJudgement:
    """Stopped when an `explicit` class is found at `block_score` or more; every class found
    keeps its best score for the trace."""
    scores: dict[str, float] = {}
    for d in found:
        scores[d.label] = max(scores.get(d.label, 0.0), d.score)
    return judge_scores(scores, block_score, explicit)


def judge_scores(
    scores: dict[str, float],
    block_score: float = BLOCK_SCORE,
    explicit: frozenset[str] = EXPLICIT,
) -> ImageJudgement:
    """The decision from the best score per class alone: what a cached screening is judged
    again with, so a changed policy applies to pictures seen before it changed."""
    labels = tuple(sorted(c for c, s in scores.items() if c in explicit and s >= block_score))
    return ImageJudgement(bool(labels), labels, dict(scores))
