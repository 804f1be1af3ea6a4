"""Wiring of the safety worker: settings → output check, Kafka (windows in), Redis (verdicts
out) → running service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from moderation.screen import OutputCheck, SafetyConfig
from runtime.settings import Settings
from schemas.ids import now_ms
from schemas.topics import SAFETY_WINDOWS
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService
from workers.safety.service import SafetyService, SafetyServiceConfig

CONSUMER_GROUP = "safety"


@contextlib.asynccontextmanager
async def run_safety_worker(
    settings: Settings, check: OutputCheck | None = None
) -> AsyncIterator[RunningService[SafetyService]]:
    clients = WorkerClients.build(settings, CONSUMER_GROUP, SAFETY_WINDOWS)
    service = SafetyService(
        redis=clients.redis,
        check=check or OutputCheck(SafetyConfig(categories=settings.safety_categories)),
        config=SafetyServiceConfig(worker_id=clients.worker_id),
        clock_ms=now_ms,
    )
    loop = clients.consume_loop(service.handle, service.fail_window, max_inflight=64)
    async with clients.run(service, loop) as running:
        yield running
