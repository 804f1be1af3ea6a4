"""Screening an image's pixels: the detector's findings as the `Screening` a turn carries.

Uploaded images are screened in preprocessing (the screening rides on the `ImageInput`, so
an image sent again is judged once and its verdict is cached with its tensor); generated
images in the image worker, before they are shown. A failed detector stops the image
(fail closed): an unscreened picture is never passed on as screened.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image

from moderation.nudity import BLOCK_SCORE, EXPLICIT, LABEL, ImageJudgement, judge, judge_scores
from moderation.nudity_model import NudityModel
from runtime.settings import Settings
from schemas.events import SafetyAction, Screening

log = logging.getLogger("turnstream.safety.image")

DETECTOR_FAILED = "image_detector_error"


@dataclass
class ImageScreen:
    model: NudityModel
    block_score: float = BLOCK_SCORE
    explicit: frozenset[str] = EXPLICIT  # the classes that stop an image

    @classmethod
    def from_settings(cls, settings: Settings) -> ImageScreen | None:
        """None when images are not screened; raises DetectorUnavailable when they should be
        and the weights are missing (a worker must not start half-safe)."""
        if not (settings.safety_screening and settings.image_safety):
            return None
        return cls(NudityModel.load(settings.image_safety_model_path))

    def screen(self, image: Image.Image | np.ndarray) -> Screening:
        """Blocking (call in a thread)."""
        started = time.perf_counter()
        try:
            found = self.model.detect(image)
        except Exception as err:  # onnxruntime on a strange array: stop it, say why
            log.warning("image detector failed: %r", err)
            return Screening(
                action=SafetyAction.BLOCK,
                labels=[LABEL],
                elapsed_ms=_ms_since(started),
                error=DETECTOR_FAILED,
            )
        return _screening(judge(found, self.block_score, self.explicit), _ms_since(started))

    def rejudge(self, seen: Screening) -> Screening:
        """A stored screening judged with today's policy (the detector's scores are kept with
        the tensor; the bar and the classes that stop an image may have changed since)."""
        return _screening(judge_scores(seen.scores, self.block_score, self.explicit), 0.0)

    @staticmethod
    def reusable(seen: Screening | None) -> bool:
        """A stored screening can be judged again (it has the detector's scores)."""
        return seen is not None and not seen.error


def _screening(verdict: ImageJudgement, elapsed_ms: float) -> Screening:
    return Screening(
        action=SafetyAction.BLOCK if verdict.blocked else SafetyAction.ALLOW,
        labels=[LABEL, *verdict.labels] if verdict.blocked else [],
        elapsed_ms=elapsed_ms,
        scores=verdict.scores,
    )


def blocked_images(screenings: list[Screening | None]) -> Screening | None:
    """The first stopped image's screening among a turn's images (None: none stopped)."""
    return next((s for s in screenings if s is not None and s.action == SafetyAction.BLOCK), None)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
