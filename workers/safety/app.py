"""Wiring of the safety worker: settings → output check, a Redis list (windows in), Redis
pub/sub (verdicts out) → running service. It needs no Kafka."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from moderation.screen import OutputCheck, SafetyConfig
from runtime.instance_id import make_instance_id
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.ids import now_ms
from workers.runtime.running import RunningService, run_service
from workers.runtime.work_list import WorkListLoop
from workers.safety.service import SafetyService, SafetyServiceConfig

ROLE = "safety"
MAX_INFLIGHT = 64  # windows judged at once (the check batches what waits: `Coalescing`)


@contextlib.asynccontextmanager
async def run_safety_worker(
    settings: Settings, check: OutputCheck | None = None
) -> AsyncIterator[RunningService[SafetyService]]:
    redis = redis_client(settings.redis_url)
    service = SafetyService(
        redis=redis,
        check=check or OutputCheck(SafetyConfig(categories=settings.safety_categories)),
        config=SafetyServiceConfig(
            worker_id=make_instance_id(ROLE, settings.worker_id),
            deadline_ms=settings.safety_deadline_ms,
        ),
        clock_ms=now_ms,
    )
    windows = RedisNames.for_namespace(settings.namespace).safety_windows_key()
    loop = WorkListLoop(
        redis, windows, service.handle, max_inflight=MAX_INFLIGHT, on_failure=service.fail_window
    )
    async with run_service(
        service, loop=loop, relay=None, redis=redis, producer=None, consumer=None
    ) as running:
        yield running
