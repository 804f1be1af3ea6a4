"""The runtime's error root: failures of process plumbing (starting a child process,
converting the bundled model, migrating ClickHouse, a request the local ClickHouse interface
refuses)."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class PlumbingError(TurnstreamError):
    code = "runtime_error"


class SpeechModelMissing(PlumbingError):
    """A bundled Whisper model's package (or one of its files) is missing: the deployment's
    fault, not the user's; retrying elsewhere may help."""

    code = "speech_model_missing"
    retryable = True
