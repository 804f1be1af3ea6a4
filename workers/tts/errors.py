"""Errors of speech synthesis. Each carries the stable `code` the client sees in-band and
whether retrying could help; like the preprocessing errors, the defaults are class attributes.

SpeechError                   root of the tree                              tts_error
├── UnknownVoice              the requested voice is not one we serve       unknown_voice
├── TextTooLong               one call's text is over the length limit      tts_text_too_long
└── SynthesisFailed           the engine raised, timed out or is missing    tts_failed
"""

from __future__ import annotations

from schemas.errors import TurnstreamError


class SpeechError(TurnstreamError):
    code = "tts_error"
    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        # An instance may override the class default: an engine crash is worth retrying, a
        # missing engine binary or model file is not, yet both are a `tts_failed` to the client.
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable

    @property
    def message(self) -> str:
        return str(self)


class UnknownVoice(SpeechError):
    code = "unknown_voice"


class TextTooLong(SpeechError):
    code = "tts_text_too_long"


class SynthesisFailed(SpeechError):
    code = "tts_failed"
    retryable = True
