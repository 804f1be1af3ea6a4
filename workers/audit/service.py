"""The audit worker: every finished turn's exchange (Kafka `traces`, consumer group `audit`)
is scored by a Llama Guard model, off the hot path.

A guard model is slow on CPU (seconds per turn), so the consumer only queues: the bounded
`AuditQueue` keeps the newest turns (or skips new ones) when the guard falls behind, and
counts what it dropped and how far behind it is. One task feeds the guard, in a thread.
Each result is a `safety.verdict` (stage `audit`: allow, or block with the S-categories)
on Kafka, where the events log and the trace views pick it up; the `AuditPolicy` turns
repeated unsafe turns into blacklist entries (the input screen refuses those users next
time) and raises alerts (Kafka `safety.alerts`, logged, counted). A turn the guard fails
on is recorded with its error, never retried, never blocking the rest. A turn the full
queue drops is recorded too (error `audit_dropped`), so a trace is never silently
unaudited. Queued turns are audited at most once: the queue is not persisted (a restart
loses what was waiting; the `traces` topic keeps them for a replay).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    SafetyAction,
    SafetyAlert,
    SafetyStage,
    SafetyVerdict,
    TraceRecorded,
)
from workers.audit.guard_model import GuardModel
from workers.audit.guard_prompt import GuardResult
from workers.audit.policy import AlertDecision, AuditPolicy, BlacklistDecision
from workers.audit.queue import AuditJob, AuditQueue
from workers.safety.blacklist import Blacklist
from workers.safety.input_gate import blacklist_user

log = logging.getLogger("turnstream.audit")

IDLE_S = 0.05
AUDIT_DROPPED = "audit_dropped"  # the error of a turn the full queue dropped


@dataclass(frozen=True, slots=True)
class AuditConfig:
    worker_id: str
    verdicts_topic: str
    alerts_topic: str


class AuditService:
    def __init__(
        self,
        *,
        guard: GuardModel,
        queue: AuditQueue,
        policy: AuditPolicy,
        blacklist: Blacklist,
        producer: AIOKafkaProducer,
        config: AuditConfig,
        clock_ms: Callable[[], float],
    ) -> None:
        self.guard = guard
        self.queue = queue
        self.policy = policy
        self.blacklist = blacklist
        self.producer = producer
        self.config = config
        self.clock_ms = clock_ms
        self.alerts = 0
        self.blacklisted = 0

    async def handle(self, event: AnyEvent) -> None:
        """Queue a finished turn (never waits for the guard)."""
        if not isinstance(event, TraceRecorded) or event.completed is None:
            return  # timed-out turns have no answer to audit
        submitted, completed = event.submitted, event.completed
        job = AuditJob(
            turn_id=event.turn_id,
            tenant=submitted.tenant_id,
            user_id=submitted.user_id,
            user_text=submitted.text,
            assistant_text=completed.text,
            completed_at_ms=int(completed.completed_at_ms),
            conversation_id=submitted.conversation_id,
        )
        dropped = self.queue.offer(job)
        if dropped is not None:
            log.warning("audit queue full: turn %s not audited", dropped.turn_id)
            await self._send_verdict(dropped, GuardResult(safe=True, error=AUDIT_DROPPED), 0.0)

    async def fail(self, event: AnyEvent, reason: str) -> None:
        log.error("could not queue %s for audit: %s", getattr(event, "turn_id", "?"), reason)

    async def run_audits(self) -> None:
        """Feed the guard until cancelled, one turn at a time."""
        while True:
            job = self.queue.take()
            if job is None:
                await asyncio.sleep(IDLE_S)
                continue
            result = await asyncio.to_thread(self.guard.classify, job.user_text, job.assistant_text)
            lag = self.queue.finish(job, int(self.clock_ms()), error=result.error is not None)
            await self._record(job, result, lag)

    async def _record(self, job: AuditJob, result: GuardResult, lag_ms: float) -> None:
        await self._send_verdict(job, result, lag_ms)
        if result.error is not None:
            log.warning("turn %s not audited: %s", job.turn_id, result.error)
            return
        unsafe = not result.safe
        decisions = self.policy.observe(
            job.tenant, job.user_id, unsafe, result.categories, int(self.clock_ms())
        )
        for decision in decisions:
            if isinstance(decision, BlacklistDecision):
                await self._blacklist(decision)
            elif isinstance(decision, AlertDecision):
                await self._alert(decision, job.turn_id)

    async def _send_verdict(self, job: AuditJob, result: GuardResult, lag_ms: float) -> None:
        unsafe = result.error is None and not result.safe
        verdict = SafetyVerdict(
            turn_id=job.turn_id,
            conversation_id=job.conversation_id,
            tenant_id=job.tenant,
            user_id=job.user_id,
            stage=SafetyStage.AUDIT,
            action=SafetyAction.BLOCK if unsafe else SafetyAction.ALLOW,
            labels=list(result.categories),
            scores={"lag_ms": round(lag_ms, 1)},
            checker=self.config.worker_id,
            at_ms=self.clock_ms(),
            error=result.error or "",
        )
        await self.producer.send(
            self.config.verdicts_topic, encode(verdict), key=job.turn_id.encode()
        )

    async def _blacklist(self, decision: BlacklistDecision) -> None:
        user = blacklist_user(decision.tenant, decision.user_id)
        await self.blacklist.add_user(user, decision.ttl_s)
        self.blacklisted += 1
        log.warning("blacklisted %s for %.0f s (%s)", user, decision.ttl_s, decision.rule)

    async def _alert(self, decision: AlertDecision, turn_id: str) -> None:
        alert = SafetyAlert(
            turn_id=turn_id,
            kind=decision.kind,
            tenant_id=decision.tenant,
            user_id=decision.user_id,
            categories=list(decision.categories),
            detail=decision.detail,
            at_ms=float(decision.at_ms),
        )
        await self.producer.send(self.config.alerts_topic, encode(alert), key=turn_id.encode())
        self.alerts += 1
        log.warning("safety alert %s: %s %s", decision.kind, decision.categories, decision.detail)
