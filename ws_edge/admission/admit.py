"""Admission of one turn at the edge: the tenant's tier (from the server's registry), then
overload control (admit, degrade or refuse, from the pools' load), then the tenant's
request and token buckets (shared by every edge node through Redis).

Overload is decided first so a refused turn takes nothing from the buckets. The turn
leaves with its tier and priority set, its `max_tokens` capped to what the tier (or the
degradation) allows, and, when degraded, the pool it must use. Tokens are counted twice:
an estimate of the new text at admission, then, when the turn ends, what it really cost
less that estimate (`charge`: the whole prompt the engine read, history, retrieved passages
and images included, and the answer; written in batches, `charges.py`), so a tenant with
long histories or long answers waits longer. When the buckets' Redis does
not answer, `fail_open` decides: admit without limits, or refuse (`store_unavailable`).
"""

from __future__ import annotations

import logging

import msgspec

from schemas.events import TurnCompleted, TurnSubmitted
from ws_edge.admission.charges import ChargeWriter
from ws_edge.admission.overload import Degrade, Reject, decide
from ws_edge.admission.pool_load import PoolLoad
from ws_edge.admission.rate_limit import RateLimiter
from ws_edge.admission.tiers import TenantRegistry
from ws_edge.errors import Overloaded, RateLimitUnavailable

log = logging.getLogger("turnstream.edge.admission")

CHARS_PER_TOKEN = 4


def estimated_prompt_tokens(turn: TurnSubmitted) -> int:
    """What the turn's text costs before the prompt is built (media are bounded apart)."""
    return max(1, len(turn.text) // CHARS_PER_TOKEN)


class AdmissionControl:
    def __init__(
        self,
        *,
        tenants: TenantRegistry,
        limiter: RateLimiter,
        load: PoolLoad,
        fail_open: bool,
        retry_after_ms: int,
        charge_linger_s: float,
    ) -> None:
        self.tenants = tenants
        self.limiter = limiter
        self.charges = ChargeWriter(limiter, linger_s=charge_linger_s)
        self.load = load
        self.fail_open = fail_open
        self.retry_after_ms = retry_after_ms
        self.refused = 0
        self.degraded = 0

    async def admit(self, turn: TurnSubmitted) -> TurnSubmitted:
        """The turn as admitted; raises `RateLimited`, `Overloaded` or `RateLimitUnavailable`."""
        plan = self.tenants.plan_of(turn.tenant_id)
        decision = decide(
            await self.load.signals(),
            plan.limits,
            requested_max_tokens=turn.decoding.max_tokens,
            retry_after_ms=self.retry_after_ms,
        )
        if isinstance(decision, Reject):
            self.refused += 1
            raise Overloaded(
                f"the service is overloaded for the {plan.tier} tier; retry after "
                f"{decision.retry_after_ms} ms",
                retry_after_ms=decision.retry_after_ms,
            )
        try:
            bucket = await self.limiter.admit(
                turn.tenant_id, plan.limits, estimated_tokens=estimated_prompt_tokens(turn)
            )
        except RateLimitUnavailable:
            if not self.fail_open:
                raise
            log.warning("rate limits unavailable: admitting %s without them", turn.turn_id)
        else:
            if not bucket.allowed:
                self.refused += 1
            bucket.raise_if_refused()
        decoding = msgspec.structs.replace(turn.decoding, max_tokens=decision.max_tokens)
        degraded = isinstance(decision, Degrade)
        self.degraded += degraded
        return msgspec.structs.replace(
            turn,
            decoding=decoding,
            tier=str(plan.tier),
            priority=decision.priority,
            degraded=degraded,
            pool=decision.pool if degraded else "",
        )

    def charge(self, completed: TurnCompleted, estimated_tokens: int = 0) -> None:
        """Count what the turn really cost against its tenant, after the fact (never
        refuses): the prompt the engine read (history, retrieved passages and images
        included, not only the new text) and the answer, less the estimate admission took
        (`estimated_tokens`); a turn that cost less than estimated is refunded. Written in
        batches by `charges` (a `ChargeWriter`, started and closed with the edge)."""
        usage = completed.usage
        tokens = usage.prompt_tokens + usage.completion_tokens - estimated_tokens
        plan = self.tenants.plan_of(completed.tenant_id)
        self.charges.add(completed.tenant_id, plan.limits, tokens)
