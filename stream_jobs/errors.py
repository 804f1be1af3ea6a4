"""The stream jobs' error root: a bad router or cache configuration, an evaluation set that
does not parse, the semantic cache's store failing."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class StreamJobError(TurnstreamError):
    code = "stream_job_error"
