"""The sink's error root: a row that cannot be stored, a statement the embedded engine
refuses."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class SinkError(TurnstreamError):
    code = "sink_error"
