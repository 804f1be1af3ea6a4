"""The audit worker: every finished turn's exchange (Kafka `traces`, consumer group `audit`)
is judged by a guard (Llama Guard when its weights are configured, else the category
classifier on the whole answer), off the hot path.

The queue is Kafka: a trace's offset is committed only after its verdict is on Kafka, so a
restart (or a crash) audits what was waiting, nothing is lost with a process's memory. The
consume loop takes at most `max_inflight` traces at once (the rest wait in the topic); one
guard call runs at a time, in a thread. When the guard falls behind, the ledger's
`max_lag_ms` can skip turns that finished too long ago: recorded with error `audit_skipped`
and counted, so a trace is never silently unaudited.

A guard that is the streaming check's own classifier (`rereads_windows`: the category
guard) is not run on an answer the windows already read whole and released
(`coverage.read_whole_by_windows`): no reading, no verdict record, counted in `covered`.
The windows' verdicts, on the turn's `turn.completed`, are that answer's record. Llama Guard
reads every answer.

Each result is a `safety.verdict` (stage `audit`: allow, or block with the S-categories,
with the guard's scores and the lag), where the events log and the trace views pick it up;
the `AuditPolicy` turns repeated unsafe turns into blacklist entries (the input screen
refuses those users next time) and raises alerts (Kafka `safety.alerts`, logged, counted).
A turn the guard fails on is recorded with its error, never retried, never blocking the
rest. Redelivery after a crash audits a turn again (at-least-once; verdicts are keyed by
turn, the last one stands).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from moderation.blacklist import Blacklist
from moderation.input_gate import blacklist_user
from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    SafetyAction,
    SafetyAlert,
    SafetyStage,
    SafetyVerdict,
    TraceRecorded,
)
from workers.audit.coverage import read_whole_by_windows
from workers.audit.guard import Guard
from workers.audit.guard_prompt import GuardResult
from workers.audit.ledger import AuditJob, AuditLedger
from workers.audit.policy import AlertDecision, AuditPolicy, BlacklistDecision

log = logging.getLogger("turnstream.audit")

AUDIT_SKIPPED = "audit_skipped"  # the error of a turn past the max lag, not judged


@dataclass(frozen=True, slots=True)
class AuditConfig:
    worker_id: str
    verdicts_topic: str
    alerts_topic: str


class AuditService:
    def __init__(
        self,
        *,
        guard: Guard,
        ledger: AuditLedger,
        policy: AuditPolicy,
        blacklist: Blacklist,
        producer: AIOKafkaProducer,
        config: AuditConfig,
        clock_ms: Callable[[], float],
    ) -> None:
        self.guard = guard
        self.ledger = ledger
        self.policy = policy
        self.blacklist = blacklist
        self.producer = producer
        self.config = config
        self.clock_ms = clock_ms
        self.alerts = 0
        self.blacklisted = 0
        self.covered = 0  # answers the windows had read whole with the guard's own model
        self._guard_slot = asyncio.Lock()  # one guard call at a time, in arrival order

    async def handle(self, event: AnyEvent) -> None:
        """Audit a finished turn; returns once its verdict is on Kafka (then its offset may
        be committed)."""
        if not isinstance(event, TraceRecorded) or event.completed is None:
            return  # timed-out turns have no answer to audit
        submitted, completed = event.submitted, event.completed
        if self.guard.rereads_windows and read_whole_by_windows(completed):
            self.covered += 1
            return
        job = AuditJob(
            turn_id=event.turn_id,
            tenant=submitted.tenant_id,
            user_id=submitted.user_id,
            user_text=submitted.text,
            assistant_text=completed.text,
            completed_at_ms=int(completed.completed_at_ms),
            conversation_id=submitted.conversation_id,
        )
        async with self._guard_slot:
            now = self.clock_ms()
            if self.ledger.too_late(job, now):
                log.warning("audit behind: turn %s skipped", job.turn_id)
                result = GuardResult(safe=True, error=AUDIT_SKIPPED)
                await self._send_verdict(job, result, self.ledger.lag(job, now))
                return
            result = await asyncio.to_thread(self.guard.classify, job.user_text, job.assistant_text)
        lag = self.ledger.finish(job, self.clock_ms(), error=result.error is not None)
        await self._record(job, result, lag)

    async def fail(self, event: AnyEvent, reason: str) -> None:
        log.error("could not audit %s: %s", getattr(event, "turn_id", "?"), reason)

    async def _record(self, job: AuditJob, result: GuardResult, lag_ms: float) -> None:
        await self._send_verdict(job, result, lag_ms)
        if result.error is not None:
            log.warning("turn %s not audited: %s", job.turn_id, result.error)
            return
        if not self.guard.enforces:  # recorded above; too noisy to blacklist or alert on
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
            scores={**result.scores, "lag_ms": round(lag_ms, 1)},
            checker=f"{self.config.worker_id}/{self.guard.name}",
            at_ms=self.clock_ms(),
            error=result.error or "",
        )
        await self.producer.send_and_wait(  # delivered before the offset can commit
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
        await self.producer.send_and_wait(
            self.config.alerts_topic, encode(alert), key=turn_id.encode()
        )
        self.alerts += 1
        log.warning("safety alert %s: %s %s", decision.kind, decision.categories, decision.detail)
