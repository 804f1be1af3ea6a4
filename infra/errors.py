"""The tools' error root (capacity planning inputs that cannot be read)."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class InfraError(TurnstreamError):
    code = "infra_error"
