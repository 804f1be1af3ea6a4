"""The safety package's errors: each carries a stable `code`, the string a verdict records
(`Verdict.error`) so traces and dashboards group failures without parsing messages."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class SafetyError(TurnstreamError):
    """Base of every error raised by the moderation library."""

    code = "safety_error"


class ClassifierError(SafetyError):
    """The profanity model could not be loaded or failed on its input."""

    code = "classifier_error"


class BlacklistError(SafetyError):
    """The blacklist store (Redis) did not answer."""

    code = "blacklist_unavailable"


class ScreenError(SafetyError):
    """Any other failure inside a screen (a bug): recorded, never raised to the worker."""

    code = "screen_error"


class RedTeamDataError(SafetyError):
    """A red-team file is missing or has a malformed line."""

    code = "redteam_data"


class DatasetError(SafetyError):
    """The classifier's data set is missing or has a malformed line."""

    code = "dataset_error"


class DetectorUnavailable(SafetyError):
    """The image detector's weights are not installed, or not where the settings say."""

    code = "image_detector_unavailable"
