"""Tiers and the tenant registry: the server decides a tenant's tier, bad files fail loudly."""

import json

import pytest

from ws_edge.admission.tiers import (
    DEFAULT_LIMITS,
    TenantRegistry,
    TenantRegistryError,
    Tier,
    TierLimits,
)


def test_defaults_rank_tiers():
    free, plus, ent = (DEFAULT_LIMITS[t] for t in (Tier.FREE, Tier.PLUS, Tier.ENTERPRISE))
    assert free.priority < plus.priority < ent.priority
    assert free.requests_per_minute < plus.requests_per_minute < ent.requests_per_minute
    assert free.max_tokens < plus.max_tokens < ent.max_tokens
    assert free.degrade_at < plus.degrade_at < ent.degrade_at
    assert free.reject_at < plus.reject_at < ent.reject_at


def test_unknown_tenant_is_free():
    registry = TenantRegistry()
    assert registry.tier_of("nobody") is Tier.FREE
    assert registry.limits_for("nobody") == DEFAULT_LIMITS[Tier.FREE]


def test_parse_tiers_tenants_and_overrides():
    registry = TenantRegistry.parse(
        {
            "tiers": {"free": {"requests_per_minute": 10}},
            "tenants": {
                "acme": "enterprise",
                "beta": {"tier": "plus", "limits": {"max_tokens": 4096, "degraded_pool": "s"}},
                "gamma": "free",
            },
        }
    )
    assert registry.tier_of("acme") is Tier.ENTERPRISE
    assert registry.limits_for("acme") == DEFAULT_LIMITS[Tier.ENTERPRISE]
    beta = registry.limits_for("beta")
    assert registry.tier_of("beta") is Tier.PLUS
    assert (beta.max_tokens, beta.degraded_pool) == (4096, "s")
    assert beta.request_burst == DEFAULT_LIMITS[Tier.PLUS].request_burst
    # the changed tier default applies to listed free tenants and unknown ones alike
    assert registry.limits_for("gamma").requests_per_minute == 10
    assert registry.limits_for("unlisted").requests_per_minute == 10
    assert len(registry) == 3


def test_load_file_and_empty_path(tmp_path):
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps({"tenants": {"acme": "plus"}}))
    assert TenantRegistry.load(path).tier_of("acme") is Tier.PLUS
    assert TenantRegistry.load("").tier_of("acme") is Tier.FREE


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ([], "expected an object"),
        ({"tenant": {}}, "unknown keys"),
        ({"tenants": {"acme": "gold"}}, "unknown tier 'gold'"),
        ({"tenants": {"acme": {"limits": {}}}}, "needs a tier"),
        ({"tenants": {"acme": {"tier": "plus", "extra": 1}}}, "unknown keys"),
        ({"tenants": {"acme": {"tier": "plus", "limits": {"rpm": 1}}}}, "unknown keys"),
        ({"tenants": {"acme": {"tier": "plus", "limits": {"max_tokens": "9"}}}}, "wrong type"),
        ({"tenants": {"acme": {"tier": "plus", "limits": {"max_tokens": True}}}}, "wrong type"),
        ({"tenants": {"acme": {"tier": "plus", "limits": {"request_burst": 0}}}}, "at least 1"),
        ({"tenants": {"a:b": "plus"}}, "tenant ids must match"),
        ({"tiers": {"free": {"tokens_per_minute": -1}}}, "positive"),
        ({"tiers": {"free": {"degrade_at": 0.9, "reject_at": 0.5}}}, "degrade_at <= reject_at"),
        ({"tiers": {"gold": {}}}, "unknown tier"),
    ],
)
def test_malformed_registry_is_a_clear_error(document, fragment):
    with pytest.raises(TenantRegistryError, match=fragment):
        TenantRegistry.parse(document)


def test_malformed_file_names_the_file(tmp_path):
    path = tmp_path / "tenants.json"
    path.write_text("{not json")
    with pytest.raises(TenantRegistryError, match=r"tenants\.json: not valid JSON"):
        TenantRegistry.load(path)
    with pytest.raises(TenantRegistryError, match="cannot read"):
        TenantRegistry.load(tmp_path / "missing.json")
    path.write_text(json.dumps({"tenants": {"acme": "gold"}}))
    with pytest.raises(TenantRegistryError, match=r"tenants\.json: tenants\.acme"):
        TenantRegistry.load(path)


def test_limits_validate_themselves():
    base = DEFAULT_LIMITS[Tier.FREE]
    with pytest.raises(ValueError, match="degraded_max_tokens"):
        TierLimits(**{**_fields(base), "degraded_max_tokens": base.max_tokens + 1})
    with pytest.raises(ValueError, match="finite"):
        TierLimits(**{**_fields(base), "requests_per_minute": float("inf")})


def _fields(limits: TierLimits) -> dict:
    return {name: getattr(limits, name) for name in limits.__dataclass_fields__}
