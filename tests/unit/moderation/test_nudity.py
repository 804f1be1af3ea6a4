"""The image detector's pure pre- and post-processing (moderation/nudity.py), on made-up
outputs: the real weights are tested in test_image_screen.py."""

from __future__ import annotations

import numpy as np
import pytest

from moderation.nudity import CLASSES, EXPLICIT, Detection, detections, judge, letterbox

ANCHORS = 2100


def _output(*boxes: tuple[int, str, float, tuple[float, float, float, float]]) -> np.ndarray:
    """A raw (4 + classes, anchors) output with the given anchors set: (anchor, class, score,
    (cx, cy, w, h) in input pixels)."""
    out = np.zeros((4 + len(CLASSES), ANCHORS), dtype=np.float32)
    for anchor, label, score, box in boxes:
        out[:4, anchor] = box
        out[4 + CLASSES.index(label), anchor] = score
    return out


def test_letterbox_pads_right_and_bottom_to_a_square_and_scales_to_the_input():
    rgb = np.full((100, 200, 3), 255, dtype=np.uint8)  # wide: padding goes below
    blob, scale = letterbox(rgb, 320)
    assert blob.shape == (1, 3, 320, 320) and blob.dtype == np.float32
    assert scale == pytest.approx(200 / 320)
    assert blob[0, :, :150].min() == pytest.approx(1.0)  # the image, white, in [0, 1]
    assert blob[0, :, 170:].max() == pytest.approx(0.0)  # the black padding


def test_letterbox_refuses_anything_but_rgb_bytes():
    with pytest.raises(ValueError, match="uint8"):
        letterbox(np.zeros((10, 10), dtype=np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        letterbox(np.zeros((10, 10, 3), dtype=np.float32))


def test_detections_map_boxes_to_the_source_image_and_drop_weak_ones():
    out = _output(
        (7, "FACE_FEMALE", 0.9, (160, 80, 40, 20)),
        (9, "FEET_EXPOSED", 0.1, (10, 10, 5, 5)),  # under the detection cut
    )
    found = detections(out, scale=2.0, width=640, height=480)
    assert found == [Detection("FACE_FEMALE", 0.9, (280.0, 140.0, 80.0, 40.0))]


def test_boxes_are_clipped_to_the_image():
    out = _output((3, "FACE_MALE", 0.8, (5, 5, 30, 30)))
    (found,) = detections(out, scale=1.0, width=12, height=12)
    x, y, w, h = found.box
    assert (x, y) == (0.0, 0.0) and x + w <= 12 and y + h <= 12


def test_overlapping_boxes_of_one_class_are_suppressed_but_not_of_two():
    out = _output(
        (1, "BELLY_EXPOSED", 0.7, (100, 100, 50, 50)),
        (2, "BELLY_EXPOSED", 0.9, (102, 101, 50, 50)),  # same place, better score
        (3, "FACE_FEMALE", 0.6, (101, 100, 50, 50)),  # same place, other class
        (4, "BELLY_EXPOSED", 0.5, (250, 250, 30, 30)),  # same class elsewhere
    )
    found = detections(out, scale=1.0, width=320, height=320)
    assert [(d.label, d.score) for d in found] == [
        ("BELLY_EXPOSED", 0.9),
        ("FACE_FEMALE", 0.6),
        ("BELLY_EXPOSED", 0.5),
    ]


def test_nothing_found_is_an_empty_list():
    assert detections(_output(), scale=1.0, width=10, height=10) == []


@pytest.mark.parametrize("label", sorted(EXPLICIT))
def test_an_explicit_class_at_the_bar_stops_the_image(label):
    verdict = judge([Detection(label, 0.45, (0, 0, 1, 1)), Detection("FACE_FEMALE", 0.9, (0,) * 4)])
    assert verdict.blocked and verdict.labels == (label,)
    assert verdict.scores == {label: 0.45, "FACE_FEMALE": 0.9}


def test_weak_explicit_findings_and_other_classes_are_recorded_not_acted_on():
    found = [
        Detection("FEMALE_BREAST_EXPOSED", 0.44, (0,) * 4),
        Detection("MALE_BREAST_EXPOSED", 0.95, (0,) * 4),
        Detection("BELLY_EXPOSED", 0.9, (0,) * 4),
        Detection("BUTTOCKS_COVERED", 0.9, (0,) * 4),
    ]
    verdict = judge(found)
    assert not verdict.blocked and verdict.labels == ()
    assert verdict.scores["FEMALE_BREAST_EXPOSED"] == 0.44


def test_the_best_score_per_class_is_kept():
    found = [Detection("FACE_MALE", 0.3, (0,) * 4), Detection("FACE_MALE", 0.8, (0,) * 4)]
    assert judge(found).scores == {"FACE_MALE": 0.8}
