"""Wiring of the audit worker: settings → guard, ledger, policy, Kafka, Redis."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from moderation.blacklist import RedisBlacklist
from runtime.settings import Settings
from schemas.ids import now_ms
from schemas.topics import SAFETY_ALERTS, SAFETY_VERDICTS, TRACES
from workers.audit.category_guard import CategoryGuard
from workers.audit.guard import Guard
from workers.audit.ledger import AuditLedger
from workers.audit.policy import AuditPolicy, PolicyConfig
from workers.audit.service import AuditConfig, AuditService
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService

CONSUMER_GROUP = "audit"
log = logging.getLogger("turnstream.audit")


def load_guard(settings: Settings) -> Guard:
    """Llama Guard from TURNSTREAM_AUDIT_MODEL_PATH when set, else the category classifier
    (loaded now, so the first trace does not wait for the encoders)."""
    if settings.audit_model_path:
        from workers.audit.guard_model import GuardModel  # torch only when it is used

        return GuardModel.load(settings.audit_model_path)
    guard = CategoryGuard()
    guard.warm_up()
    log.info("no Llama Guard configured: the category classifier audits")
    return guard


@contextlib.asynccontextmanager
async def run_auditor(
    settings: Settings, guard: Guard | None = None, policy: PolicyConfig | None = None
) -> AsyncIterator[RunningService[AuditService]]:
    guard = guard if guard is not None else load_guard(settings)
    clients = WorkerClients.build(settings, CONSUMER_GROUP, TRACES)
    service = AuditService(
        guard=guard,
        ledger=AuditLedger(max_lag_ms=settings.audit_max_lag_s * 1000),
        policy=AuditPolicy(policy),
        blacklist=RedisBlacklist(clients.redis, prefix=clients.names.prefix),
        producer=clients.producer,
        config=AuditConfig(
            worker_id=clients.worker_id,
            verdicts_topic=clients.topic(SAFETY_VERDICTS),
            alerts_topic=clients.topic(SAFETY_ALERTS),
        ),
        clock_ms=now_ms,
    )
    loop = clients.consume_loop(service.handle, service.fail, max_inflight=settings.audit_inflight)
    async with clients.run(service, loop) as running:
        yield running
