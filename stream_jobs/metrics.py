"""The faust jobs' Prometheus metrics: faust's own sensor (messages and events per topic and
stream, event runtime, commit and send latency, rebalances, table operations, under the
`faust_` prefix) plus the consumer lag every other consumer exports, so one series and one
KEDA trigger cover the stream jobs too."""

from __future__ import annotations

import functools
from typing import Any

import faust
from faust.sensors.prometheus import FaustMetrics, PrometheusMonitor

from runtime.lag import LagGauge
from runtime.prometheus import REGISTRY


@functools.cache
def faust_metrics() -> FaustMetrics:
    """faust's metric set, registered once per process (metric names are global)."""
    return FaustMetrics.create(REGISTRY, "faust")


class JobMonitor(PrometheusMonitor):
    """faust's Prometheus sensor, also exporting each record's partition lag."""

    def __init__(self, lag: LagGauge, **kwargs: Any) -> None:
        super().__init__(metrics=faust_metrics(), **kwargs)
        self._lag = lag

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        super().on_message_in(tp, offset, message)
        self._lag.observe(tp.topic, tp.partition, offset)


def install_metrics(app: faust.App) -> None:
    """Replace the app's monitor (before it starts) with one that feeds our registry."""
    from faust.types import TP

    def highwater(tp: tuple[str, int]) -> int | None:
        return app.consumer.highwater(TP(*tp))

    app.monitor = JobMonitor(LagGauge(app.conf.id, highwater))
