"""Errors of the shared vocabulary, and the root every package's error tree grows from.

TurnstreamError            a stable `code` (what the client, the trace or the dead letter
│                          records) and `retryable` (whether trying again could help)
└──     ├── DecodeError            payload cannot be turned into an event
    │   ├── MalformedEvent     not JSON, wrong shape, wrong field types, unknown fields
    │   ├── UnsupportedVersion envelope version this build does not speak
    │   └── UnknownEventType   a type name this build does not know
    └── SettingsError          an environment variable holds a value of the wrong kind
        └── ToolAccessError    the tool allow-list is unreadable (schemas.tools)

Each package has one root under TurnstreamError (`EdgeError`, `PreprocessError`,
`InferenceError`, `SafetyError`, `PlumbingError`, `StreamJobError`, `ProducerError`,
`FlywheelError`, …), so
a caller can catch one package's errors, or all of turnstream's, by class.
"""


class TurnstreamError(Exception):
    """Root of every error turnstream raises."""

    code: str = "internal_error"
    retryable: bool = False


class SchemaError(TurnstreamError):
    """Root of every error raised by `schemas`."""

    code = "schema_error"


class DecodeError(SchemaError):
    """A payload could not be decoded into an event; consumers log it and dead-letter it."""

    code = "decode_error"


class MalformedEvent(DecodeError):
    code = "malformed_event"


class UnsupportedVersion(DecodeError):
    code = "unsupported_version"


class UnknownEventType(DecodeError):
    code = "unknown_event_type"


class SettingsError(SchemaError):
    code = "bad_setting"
