"""The producers' error root: Kafka not taking a turn, a replay plan or source that cannot
be used."""

from __future__ import annotations

from schemas.errors import TurnstreamError


class ProducerError(TurnstreamError):
    code = "producer_error"
