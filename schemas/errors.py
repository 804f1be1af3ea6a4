"""Errors of the shared vocabulary.

SchemaError
├── DecodeError            payload cannot be turned into an event
│   ├── MalformedEvent     not JSON, wrong shape, wrong field types, unknown fields
│   ├── UnsupportedVersion envelope version this build does not speak
│   └── UnknownEventType   a type name this build does not know
└── SettingsError          an environment variable holds a value of the wrong kind
"""


class SchemaError(Exception):
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
