"""Overload control: lower tiers degrade and are refused first; degradation before refusal."""

import dataclasses
import math

import pytest

from ws_edge.admission.overload import Admit, Degrade, LoadSignal, Reject, decide
from ws_edge.admission.tiers import DEFAULT_LIMITS, DEFAULT_POOL, Tier


def load(fraction: float, capacity: int = 100, pool: str = DEFAULT_POOL) -> dict[str, LoadSignal]:
    return {pool: LoadSignal(in_flight=round(fraction * capacity), capacity=capacity)}


def kind(decision) -> str:
    return type(decision).__name__


def test_idle_admits_every_tier_with_its_own_limits():
    for tier in Tier:
        limits = DEFAULT_LIMITS[tier]
        assert decide(load(0.0), limits) == Admit(limits.pool, limits.max_tokens, limits.priority)


def test_free_degrades_then_rejects_first_enterprise_last():
    ladder = {
        tier: [kind(decide(load(f), DEFAULT_LIMITS[tier])) for f in (0.4, 0.6, 0.85, 1.2, 1.6)]
        for tier in Tier
    }
    assert ladder[Tier.FREE] == ["Admit", "Degrade", "Reject", "Reject", "Reject"]
    assert ladder[Tier.PLUS] == ["Admit", "Admit", "Degrade", "Reject", "Reject"]
    assert ladder[Tier.ENTERPRISE] == ["Admit", "Admit", "Admit", "Degrade", "Reject"]


def test_degrade_caps_max_tokens_and_keeps_priority():
    limits = DEFAULT_LIMITS[Tier.PLUS]
    decision = decide(load(0.8), limits)
    assert isinstance(decision, Degrade)
    assert decision.max_tokens == limits.degraded_max_tokens < limits.max_tokens
    assert decision.priority == limits.priority
    assert decision.pool == limits.pool
    assert decision.utilization == pytest.approx(0.8)


def test_requested_max_tokens_is_capped_never_raised():
    limits = DEFAULT_LIMITS[Tier.FREE]
    assert decide(load(0), limits, requested_max_tokens=100).max_tokens == 100
    assert decide(load(0), limits, requested_max_tokens=10_000).max_tokens == limits.max_tokens
    assert decide(load(0.6), limits, requested_max_tokens=10_000).max_tokens == 256
    assert decide(load(0.6), limits, requested_max_tokens=100).max_tokens == 100


def test_degrade_to_a_smaller_pool_while_it_has_room():
    limits = dataclasses.replace(DEFAULT_LIMITS[Tier.FREE], degraded_pool="small")
    busy_main = {**load(0.95), **load(0.2, pool="small")}
    decision = decide(busy_main, limits)
    assert isinstance(decision, Degrade)
    assert (decision.pool, decision.utilization) == ("small", pytest.approx(0.95))
    both_busy = {**load(0.95), **load(0.9, pool="small")}
    rejected = decide(both_busy, limits, retry_after_ms=2500)
    assert rejected == Reject(2500, "overloaded", pytest.approx(0.9))


def test_thresholds_are_configurable():
    limits = dataclasses.replace(DEFAULT_LIMITS[Tier.FREE], degrade_at=0.1, reject_at=0.2)
    assert isinstance(decide(load(0.15), limits), Degrade)
    assert isinstance(decide(load(0.25), limits), Reject)


def test_missing_signal_is_idle_and_zero_capacity_is_full():
    limits = DEFAULT_LIMITS[Tier.ENTERPRISE]
    assert isinstance(decide({}, limits), Admit)
    assert LoadSignal(in_flight=0, capacity=0).utilization == math.inf
    assert isinstance(decide({DEFAULT_POOL: LoadSignal(0, 0)}, limits), Reject)
