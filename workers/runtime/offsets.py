"""Which offsets are safe to commit when messages finish out of order (pure).

A worker handles many turns of a partition at once; a turn that finishes early must not
commit past one still running, or a crash would lose the running one. The tracker commits
the lowest offset still in flight (Kafka's commit = next offset to read).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Generic, TypeVar

P = TypeVar("P")  # a partition handle (aiokafka TopicPartition, or anything hashable)


class OffsetTracker(Generic[P]):
    def __init__(self) -> None:
        self._in_flight: dict[P, set[int]] = defaultdict(set)
        self._next: dict[P, int] = {}  # highest seen offset + 1, per partition
        self._committed: dict[P, int] = {}

    def started(self, partition: P, offset: int) -> None:
        self._in_flight[partition].add(offset)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)

    def finished(self, partition: P, offset: int) -> None:
        self._in_flight[partition].discard(offset)

    def committable(self) -> dict[P, int]:
        """Offsets to commit now (only partitions whose safe point moved)."""
        result: dict[P, int] = {}
        for partition, nxt in self._next.items():
            pending = self._in_flight.get(partition)
            safe = min(pending) if pending else nxt
            if self._committed.get(partition) != safe:
                result[partition] = safe
        return result

    def mark_committed(self, offsets: dict[P, int]) -> None:
        self._committed.update(offsets)

    def forget(self, partitions: list[P]) -> None:
        """Partitions revoked in a rebalance: their in-flight turns will be redelivered."""
        for partition in partitions:
            self._in_flight.pop(partition, None)
            self._next.pop(partition, None)
            self._committed.pop(partition, None)

    def in_flight(self) -> int:
        return sum(len(v) for v in self._in_flight.values())
