"""A batch of rows on its way to ClickHouse, and the Kafka offsets it covers (pure).

The batch remembers, per partition, the first and last offset it consumed (rows and dead
letters alike), so after a durable insert the consumer commits exactly past it, and the
insert's deduplication token names exactly those offsets: the same records inserted again
(after a crash between insert and commit) are recognised by ClickHouse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import TopicPartition


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_rows: int = 5000
    max_bytes: int = 8 * 1024 * 1024
    linger_s: float = 0.2  # the visibility lag a quiet topic pays at most


@dataclass
class Batch:
    opened_at: float
    rows: list[tuple] = field(default_factory=list)
    size_bytes: int = 0
    spans: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def consumed(self, tp: TopicPartition, offset: int) -> bool:
        """Note the record as consumed; False when this batch already has it (a rebalance
        resets positions to the committed offset, and the records come again)."""
        span = self.spans.get(tp)
        if span is not None and offset <= span[1]:
            return False
        self.spans[tp] = (span[0] if span else offset, offset)
        return True

    def add(self, row: tuple, size_bytes: int) -> None:
        self.rows.append(row)
        self.size_bytes += size_bytes

    def due(self, limits: BatchLimits, now: float) -> bool:
        if not self.spans:
            return False
        return (
            len(self.rows) >= limits.max_rows
            or self.size_bytes >= limits.max_bytes
            or now - self.opened_at >= limits.linger_s
        )

    def token(self) -> str:
        """Same records → same token (ClickHouse drops a repeated insert by it)."""
        return ",".join(
            f"{tp.topic}:{tp.partition}:{first}-{last}"
            for tp, (first, last) in sorted(self.spans.items())
        )

    def commit_offsets(self) -> dict[TopicPartition, int]:
        return {tp: last + 1 for tp, (_, last) in self.spans.items()}
