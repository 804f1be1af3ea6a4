"""The safety package's errors: each carries a stable `code`, the string a verdict records
(`Verdict.error`) so traces and dashboards group failures without parsing messages."""

from __future__ import annotations

from typing import ClassVar


class SafetyError(Exception):
    """Base of every error raised by the moderation library."""

    code: ClassVar[str] = "safety_error"


class ClassifierError(SafetyError):
    """The profanity model could not be loaded or failed on its input."""

    code: ClassVar[str] = "classifier_error"


class BlacklistError(SafetyError):
    """The blacklist store (Redis) did not answer."""

    code: ClassVar[str] = "blacklist_unavailable"


class ScreenError(SafetyError):
    """Any other failure inside a screen (a bug): recorded, never raised to the worker."""

    code: ClassVar[str] = "screen_error"


class RedTeamDataError(SafetyError):
    """A red-team file is missing or has a malformed line."""

    code: ClassVar[str] = "redteam_data"


class DatasetError(SafetyError):
    """The classifier's data set is missing or has a malformed line."""

    code: ClassVar[str] = "dataset_error"


class DetectorUnavailable(SafetyError):
    """The image detector's weights are not installed, or not where the settings say."""

    code: ClassVar[str] = "image_detector_unavailable"
