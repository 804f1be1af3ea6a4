"""Tenant token buckets against the real local Redis: exact at capacity, atomic, isolated."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import jwt
import pytest

from harness.polling import eventually
from runtime.redis import redis_client
from schemas.channels import RedisNames
from ws_edge.admission.charges import ChargeWriter
from ws_edge.admission.rate_limit import RateLimiter
from ws_edge.admission.tiers import DEFAULT_LIMITS, TenantRegistry, Tier, TierLimits
from ws_edge.auth import ALGORITHM, ISSUER, verify_token
from ws_edge.errors import RateLimited, RateLimitUnavailable, StoreUnavailable

pytestmark = pytest.mark.integration

SLOW = 0.001  # per minute: no measurable refill while a test runs


def limits(**changes) -> TierLimits:
    base = dataclasses.replace(
        DEFAULT_LIMITS[Tier.FREE],
        requests_per_minute=SLOW,
        request_burst=10,
        tokens_per_minute=SLOW,
        token_burst=1000,
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
async def limiter(services, session_namespace):
    """(limiter, redis, new tenant id); the tenants' buckets are deleted afterwards."""
    redis = redis_client(services.redis_url)
    rl = RateLimiter(redis, RedisNames.for_namespace(f"{session_namespace}-rl").prefix)
    used: list[str] = []

    def tenant() -> str:
        used.append(f"t-{uuid.uuid4().hex[:10]}")
        return used[-1]

    try:
        yield rl, redis, tenant
    finally:
        keys = [rl.key(t, kind) for t in used for kind in ("requests", "tokens")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def test_burst_is_limited_exactly_at_capacity_and_others_unaffected(limiter):
    rl, _, tenant = limiter
    noisy, quiet, lim = tenant(), tenant(), limits(request_burst=5)
    results = [await rl.admit(noisy, lim, estimated_tokens=1) for _ in range(8)]
    assert [r.allowed for r in results] == [True] * 5 + [False] * 3
    assert [r.remaining_requests for r in results[:5]] == [4, 3, 2, 1, 0]
    refused = results[-1]
    assert refused.reason == "requests"
    assert refused.retry_after_ms > 0
    with pytest.raises(RateLimited) as caught:
        refused.raise_if_refused()
    assert (caught.value.code, caught.value.retryable) == ("rate_limited", True)
    assert caught.value.retry_after_ms == refused.retry_after_ms
    assert caught.value.reason == "requests"
    quiet_results = [await rl.admit(quiet, lim, estimated_tokens=1) for _ in range(5)]
    assert all(r.allowed for r in quiet_results)


async def test_refill_retry_after_is_within_the_period_and_honoured(limiter):
    rl, _, tenant = limiter
    who, lim = tenant(), limits(request_burst=3, requests_per_minute=600)  # one per 100 ms
    for _ in range(3):
        (await rl.admit(who, lim, estimated_tokens=0)).raise_if_refused()
    refused = await rl.admit(who, lim, estimated_tokens=0)
    if refused.allowed:  # a slow machine took over 100 ms for three calls: drain again
        refused = await rl.admit(who, lim, estimated_tokens=0)
    assert not refused.allowed
    assert 0 < refused.retry_after_ms <= 100
    await asyncio.sleep(refused.retry_after_ms / 1000)
    assert (await rl.admit(who, lim, estimated_tokens=0)).allowed


async def test_concurrent_admits_are_atomic(limiter):
    rl, _, tenant = limiter
    who, lim = tenant(), limits(request_burst=10)
    results = await asyncio.gather(*(rl.admit(who, lim, estimated_tokens=5) for _ in range(50)))
    assert sum(r.allowed for r in results) == 10
    # both buckets were taken from exactly 10 times
    assert (await rl.charge(who, lim, 0)) == 1000 - 10 * 5


async def test_a_refusal_takes_nothing(limiter):
    rl, _, tenant = limiter
    who, lim = tenant(), limits(request_burst=5, token_burst=100)
    first = await rl.admit(who, lim, estimated_tokens=80)
    assert (first.allowed, first.remaining_requests, first.remaining_tokens) == (True, 4, 20)
    refused = await rl.admit(who, lim, estimated_tokens=50)
    assert (refused.allowed, refused.reason) == (False, "tokens")
    assert (refused.remaining_requests, refused.remaining_tokens) == (4, 20)
    after = await rl.admit(who, lim, estimated_tokens=20)
    assert (after.allowed, after.remaining_requests, after.remaining_tokens) == (True, 3, 0)


async def test_token_debt_makes_an_overspender_wait(limiter):
    rl, _, tenant = limiter
    who = tenant()
    lim = limits(token_burst=100, tokens_per_minute=60_000)  # one token per ms
    assert (await rl.admit(who, lim, estimated_tokens=50)).allowed
    level = await rl.charge(who, lim, 400)  # the answer cost far more than estimated
    assert -350 <= level < 0  # 50 - 400, plus whatever refilled since (no clock bound)
    refused = await rl.admit(who, lim, estimated_tokens=0)
    assert (refused.allowed, refused.reason) == (False, "tokens")
    assert 0 < refused.retry_after_ms <= -level + 1
    await asyncio.sleep(refused.retry_after_ms / 1000)
    assert (await rl.admit(who, lim, estimated_tokens=0)).allowed


async def test_estimate_over_burst_waits_for_a_full_bucket_then_goes_into_debt(limiter):
    rl, _, tenant = limiter
    who, lim = tenant(), limits(token_burst=100)
    big = await rl.admit(who, lim, estimated_tokens=250)
    assert (big.allowed, big.remaining_tokens) == (True, -150)
    assert not (await rl.admit(who, lim, estimated_tokens=1)).allowed


async def test_refunds_are_capped_at_the_burst(limiter):
    rl, _, tenant = limiter
    who, lim = tenant(), limits(token_burst=100)
    await rl.admit(who, lim, estimated_tokens=60)
    assert await rl.charge(who, lim, -30) == 70
    assert await rl.charge(who, lim, -500) == 100


async def test_buckets_expire_when_they_would_be_full(limiter):
    rl, redis, tenant = limiter
    who = tenant()
    lim = limits(request_burst=5, requests_per_minute=60_000, tokens_per_minute=60_000)
    await rl.admit(who, lim, estimated_tokens=10)
    for kind in ("requests", "tokens"):
        ttl = await redis.pttl(rl.key(who, kind))
        assert 0 < ttl <= 1000 + 10  # refill time plus the 1 s margin
    assert rl.key(who, "tokens").endswith(f":rl:{{{who}}}:tokens")


async def test_a_tier_claim_in_the_token_has_no_effect(limiter):
    rl, _, tenant = limiter
    secret = "s" * 32
    now = int(time.time())
    claims = {"sub": "u", "tenant": tenant(), "tier": "enterprise", "iat": now, "exp": now + 60}
    principal = verify_token(secret, jwt.encode({**claims, "iss": ISSUER}, secret, ALGORITHM))
    registry = TenantRegistry.parse({"tenants": {"someone-else": "enterprise"}})
    assert registry.tier_of(principal.tenant_id) is Tier.FREE
    lim = dataclasses.replace(registry.limits_for(principal.tenant_id), requests_per_minute=SLOW)
    burst = DEFAULT_LIMITS[Tier.FREE].request_burst
    results = [
        await rl.admit(principal.tenant_id, lim, estimated_tokens=1) for _ in range(burst + 1)
    ]
    assert [r.allowed for r in results] == [True] * burst + [False]


async def test_bad_tenant_id_never_reaches_redis(limiter):
    rl = limiter[0]
    with pytest.raises(ValueError, match="tenant id"):
        await rl.admit("a}:b", limits(), estimated_tokens=1)
    with pytest.raises(ValueError, match="negative"):
        await rl.admit("a", limits(), estimated_tokens=-1)


async def test_unreachable_redis_raises_rate_limit_unavailable():
    redis = redis_client("redis://127.0.0.1:1/0", wait_s=0.2)
    try:
        with pytest.raises(RateLimitUnavailable) as caught:
            await RateLimiter(redis, "x").admit("a", limits(), estimated_tokens=1)
        assert isinstance(caught.value, StoreUnavailable)
        assert (caught.value.code, caught.value.retryable) == ("store_unavailable", True)
    finally:
        await redis.aclose()


async def test_charges_of_many_tenants_land_in_one_round_trip(limiter):
    rl, _, tenant = limiter
    lim = limits(token_burst=1000)
    who = [tenant() for _ in range(5)]
    levels = await rl.charge_many([(t, lim, 10 * (i + 1)) for i, t in enumerate(who)])
    assert levels == [990, 980, 970, 960, 950]
    assert [await rl.charge(t, lim, 0) for t in who] == levels


async def test_ended_turns_charged_during_a_redis_stall_are_counted_once_it_passes(
    services, session_namespace
):
    """Redis stops taking writes for longer than the limiter waits (a failover's pause): the
    writer keeps the sums and retries, so every ended turn is counted, each once."""
    redis = redis_client(services.redis_url)
    rl = RateLimiter(redis, f"{session_namespace}-stall", timeout_s=0.2)
    writer = ChargeWriter(rl, linger_s=0.01, retry_s=0.1)
    who, lim = f"t-{uuid.uuid4().hex[:10]}", limits(token_burst=10_000)
    writer.start()
    try:
        await redis.execute_command("CLIENT", "PAUSE", 1200, "WRITE")
        for _ in range(300):
            writer.add(who, lim, 3)
        await eventually(lambda: writer.failed_writes >= 2, timeout_s=5)
        await eventually(lambda: writer.writes >= 1 and not len(writer.owed), timeout_s=10)
        assert await rl.charge(who, lim, 0) == 10_000 - 900
    finally:
        await redis.execute_command("CLIENT", "UNPAUSE")
        await writer.close()
        await redis.delete(rl.key(who, "requests"), rl.key(who, "tokens"))
        await redis.aclose()
