"""Overload control: admit, degrade or refuse a turn from the pools' load and the tenant's tier.

Graceful before hard: as a pool fills, a tier first loses its long answers (and may move to a
smaller pool), and only past its reject threshold is it refused. Lower tiers have lower
thresholds, so free tenants degrade and are refused first and enterprise ones last; `priority`
on the decision lets the scheduler serve higher tiers first among what is admitted.

Pure: the caller supplies the load (from worker metrics) and acts on the decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ws_edge.admission.tiers import TierLimits

OVERLOADED = "overloaded"


@dataclass(frozen=True, slots=True)
class LoadSignal:
    """One pool's load: turns it holds (running and queued) and how many it serves at once."""

    in_flight: int
    capacity: int

    @property
    def utilization(self) -> float:
        """in_flight / capacity; may exceed 1 when turns queue. A pool with no capacity is
        infinitely loaded (nobody can serve it)."""
        if self.capacity <= 0:
            return math.inf
        return max(self.in_flight, 0) / self.capacity


IDLE = LoadSignal(in_flight=0, capacity=1)


@dataclass(frozen=True, slots=True)
class Admit:
    pool: str
    max_tokens: int
    priority: int


@dataclass(frozen=True, slots=True)
class Degrade:
    pool: str
    max_tokens: int
    priority: int
    reason: str
    utilization: float  # of the tier's own pool, for logs and metrics


@dataclass(frozen=True, slots=True)
class Reject:
    retry_after_ms: int
    reason: str
    utilization: float  # of the pool the turn would have run on


Decision = Admit | Degrade | Reject


def decide(
    load: Mapping[str, LoadSignal],
    limits: TierLimits,
    *,
    requested_max_tokens: int | None = None,
    retry_after_ms: int = 1000,
) -> Decision:
    """The decision for one turn. A pool missing from `load` counts as idle: no signal yet
    (startup, metrics lag) is not overload, and the rate limits still hold."""
    asked = requested_max_tokens if requested_max_tokens is not None else limits.max_tokens
    primary = load.get(limits.pool, IDLE).utilization
    if primary < limits.degrade_at:
        return Admit(limits.pool, min(asked, limits.max_tokens), limits.priority)
    target = limits.degraded_pool or limits.pool
    target_load = load.get(target, IDLE).utilization
    if target_load < limits.reject_at:
        return Degrade(
            target,
            min(asked, limits.degraded_max_tokens),
            limits.priority,
            OVERLOADED,
            primary,
        )
    return Reject(retry_after_ms, OVERLOADED, target_load)
