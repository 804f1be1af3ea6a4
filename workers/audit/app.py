"""Wiring of the audit worker: settings → guard model, queue, policy, Kafka, Redis."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from schemas.ids import now_ms
from schemas.settings import Settings
from schemas.topics import SAFETY_ALERTS, SAFETY_VERDICTS, TRACES
from workers.audit.guard_model import GuardModel
from workers.audit.policy import AuditPolicy, PolicyConfig
from workers.audit.queue import AuditQueue
from workers.audit.service import AuditConfig, AuditService
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService
from workers.safety.blacklist import RedisBlacklist

CONSUMER_GROUP = "audit"


class AuditNotConfigured(RuntimeError):
    pass


@contextlib.asynccontextmanager
async def run_auditor(
    settings: Settings, guard: GuardModel | None = None, policy: PolicyConfig | None = None
) -> AsyncIterator[RunningService[AuditService]]:
    if guard is None:
        if not settings.audit_model_path:
            raise AuditNotConfigured(
                "set TURNSTREAM_AUDIT_MODEL_PATH to a Llama Guard model folder "
                "(see workers/audit/guard_model.py)"
            )
        guard = GuardModel.load(settings.audit_model_path)
    clients = WorkerClients.build(settings, CONSUMER_GROUP, TRACES)
    service = AuditService(
        guard=guard,
        queue=AuditQueue(settings.audit_queue, settings.audit_drop_policy),
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
    loop = clients.consume_loop(service.handle, service.fail, max_inflight=64)
    async with clients.run(service, loop, audits=service.run_audits()) as running:
        yield running
