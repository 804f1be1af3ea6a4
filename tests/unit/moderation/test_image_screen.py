"""The image screen on the real NudeNet weights (the `nudenet` wheel setup installs): a
public-domain portrait (Grace Hopper, US Navy, in matplotlib's sample data) is allowed and
its face found; the decision follows the policy, also for a stored screening; a broken
detector stops the image. No explicit picture is kept in the repo: the stopping path is
driven by declaring the face class explicit."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.media import PORTRAIT
from moderation.image_screen import DETECTOR_FAILED, ImageScreen, blocked_images
from moderation.nudity import LABEL
from moderation.nudity_model import NudityModel
from schemas.events import SafetyAction, Screening
from workers.preprocess.images import ImageLimits, preprocess_image


@pytest.fixture(scope="module")
def model() -> NudityModel:
    return NudityModel.load()


def test_a_portrait_is_allowed_and_its_face_is_found(model):
    screening = ImageScreen(model).screen(Image.open(PORTRAIT))
    assert screening.action == SafetyAction.ALLOW and screening.labels == []
    assert screening.scores.get("FACE_FEMALE", 0) > 0.5
    assert not any(k.endswith("_EXPOSED") for k in screening.scores)
    assert screening.elapsed_ms > 0


def test_the_letterboxed_view_preprocessing_makes_is_read_the_same(model):
    view = preprocess_image(PORTRAIT.read_bytes(), ImageLimits()).view
    assert view is not None and view.size == (336, 336)
    assert ImageScreen(model).screen(view).scores.get("FACE_FEMALE", 0) > 0.5


def test_a_class_declared_explicit_stops_the_image(model):
    screen = ImageScreen(model, explicit=frozenset({"FACE_FEMALE"}))
    screening = screen.screen(Image.open(PORTRAIT))
    assert screening.action == SafetyAction.BLOCK
    assert screening.labels == [LABEL, "FACE_FEMALE"]


def test_noise_is_allowed_with_nothing_found(model):
    noise = np.random.default_rng(3).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    screening = ImageScreen(model).screen(noise)
    assert screening.action == SafetyAction.ALLOW and screening.labels == []


def test_a_stored_screening_is_judged_with_todays_policy(model):
    seen = ImageScreen(model).screen(Image.open(PORTRAIT))
    stricter = ImageScreen(model, explicit=frozenset({"FACE_FEMALE"}))
    again = stricter.rejudge(seen)
    assert again.action == SafetyAction.BLOCK and again.scores == seen.scores
    assert ImageScreen(model).rejudge(again).action == SafetyAction.ALLOW
    assert ImageScreen.reusable(seen) and not ImageScreen.reusable(None)


class _Broken:
    def detect(self, image):
        raise RuntimeError("onnxruntime fell over")


def test_a_failing_detector_stops_the_image_and_says_so():
    screening = ImageScreen(_Broken()).screen(Image.open(PORTRAIT))  # type: ignore[arg-type]
    assert screening.action == SafetyAction.BLOCK and screening.error == DETECTOR_FAILED
    assert not ImageScreen.reusable(screening)  # judged again next time, not cached


def test_the_first_stopped_image_of_a_turn_is_found():
    allowed = Screening(action=SafetyAction.ALLOW)
    stopped = Screening(action=SafetyAction.BLOCK, labels=[LABEL])
    assert blocked_images([None, allowed]) is None
    assert blocked_images([allowed, None, stopped]) is stopped
