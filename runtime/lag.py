"""Consumer lag on the metrics endpoint: one gauge, fed the same way by every consumer (the
workers' loop, the ClickHouse sink, the faust jobs), so KEDA and the dashboard read a single
series, `turnstream_consumer_lag_records{group, topic, partition}`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from runtime import prometheus as prom

log = logging.getLogger("turnstream.lag")

Highwater = Callable[[Any], int | None]  # a topic-partition → its high watermark, if known


def records_behind(highwater: int, offset: int) -> int:
    """Records after `offset` (the one just taken) that the partition already holds."""
    return max(0, highwater - offset - 1)


class LagGauge:
    """Exports a consumer group's lag per partition as records are taken. Metrics never
    cost a record anything: a failure to read the watermark is logged once and ignored."""

    def __init__(self, group: str, highwater: Highwater) -> None:
        self.group = group
        self._highwater = highwater
        self._failed = False

    def observe(self, topic: str, partition: int, offset: int) -> None:
        try:
            highwater = self._highwater((topic, partition))
            if highwater is not None:
                lag = records_behind(highwater, offset)
                prom.CONSUMER_LAG.labels(self.group, topic, str(partition)).set(lag)
        except Exception:
            if not self._failed:
                log.warning("consumer lag of %s not exported", self.group, exc_info=True)
                self._failed = True


def aiokafka_lag(consumer: Any) -> LagGauge:
    """The lag gauge of an aiokafka consumer (its group id and last fetched watermarks)."""
    from aiokafka import TopicPartition

    group = getattr(consumer, "_group_id", None) or ""  # aiokafka keeps its only copy here
    return LagGauge(group, lambda tp: consumer.highwater(TopicPartition(*tp)))
