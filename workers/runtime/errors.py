"""The worker runtime's error root: the relay to the edges failing or overflowing."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class WorkerError(TurnstreamError):
    code = "worker_error"
