"""The W3C `traceparent` value a turn carries, read without a tracing library: what a trace
row needs (the trace id, only for a sampled trace) is part of the contract, so the sink and
the traces job agree on it whether or not they trace themselves. It accepts exactly what
OpenTelemetry's propagator accepts (version 00 with no suffix, never ff, no all-zero ids).
"""

from __future__ import annotations

import re

_FORMAT = re.compile(
    r"^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$"
)


def trace_id_of(value: str) -> str:
    """The 32-hex-digit trace id of a sampled `traceparent` value ("" when it names none, or
    a trace nobody records): the key to look a turn up in Jaeger or Tempo from ClickHouse."""
    match = _FORMAT.match(value or "")
    if not match:
        return ""
    version, trace_id, span_id, flags, suffix = match.groups()
    if trace_id == "0" * 32 or span_id == "0" * 16 or version == "ff":
        return ""
    if version == "00" and suffix:
        return ""
    return trace_id if int(flags, 16) & 1 else ""
