"""Counts of the turns an inference worker holds, for its metrics.

The engine's own `waiting` count misses the turns the worker holds back before they reach
the engine (behind an earlier turn of their conversation, loading pixels, waiting for the
image budget); a load-aware router needs those too: they are the worker's queue.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class TurnGauges:
    """`held`: turns taken from Kafka and not finished (queued, generating, or being
    recorded); `queued`: those of them not yet handed to the engine."""

    def __init__(self) -> None:
        self.held = 0
        self.queued = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[Held]:
        """Count a turn for as long as the block runs; it is queued until `started()`."""
        held = Held(self)
        self.held += 1
        self.queued += 1
        try:
            yield held
        finally:
            held.started()
            self.held -= 1


class Held:
    """One held turn; `started()` (idempotent) moves it from the queue into the engine."""

    __slots__ = ("_gauges", "_queued")

    def __init__(self, gauges: TurnGauges) -> None:
        self._gauges = gauges
        self._queued = True

    def started(self) -> None:
        if self._queued:
            self._queued = False
            self._gauges.queued -= 1
