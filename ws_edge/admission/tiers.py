"""Service tiers and what each may use: rate limits, turn size, priority, overload behaviour.

A tenant's tier comes only from the server's `TenantRegistry` (a JSON file the operator
owns), never from the client or its token: a token names a tenant, the registry decides what
that tenant gets. Tenants the registry does not list are `free`.

Registry file::

    {
      "tiers": {"free": {"requests_per_minute": 10}},          optional: change tier defaults
      "tenants": {
        "acme": "enterprise",                                    a tier
        "beta": {"tier": "plus", "limits": {"max_tokens": 4096}} a tier and per-tenant overrides
      }
    }

Pure apart from `TenantRegistry.load`, which reads the file and hands it to `parse`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from schemas.errors import SettingsError
from ws_edge.auth import TENANT_ID

DEFAULT_POOL = "chat"  # the default inference pool (the first of TURNSTREAM_POOLS)


class Tier(StrEnum):
    FREE = "free"
    PLUS = "plus"
    ENTERPRISE = "enterprise"


class TenantRegistryError(SettingsError):
    """The tenant registry file is missing, not JSON, or holds values it does not accept."""

    code = "bad_tenant_registry"


@dataclass(frozen=True, slots=True)
class TierLimits:
    """What one tenant may use. Buckets refill continuously at `*_per_minute` up to `*_burst`.

    Overload: while the pool's load (in flight / capacity) is below `degrade_at` turns run
    as asked; from `degrade_at` they go to `degraded_pool` (None: the same pool) capped at
    `degraded_max_tokens`; once the pool they would run on is at `reject_at` they are refused.
    Lower tiers get lower thresholds, so they degrade and are refused first.
    """

    requests_per_minute: float
    request_burst: int
    tokens_per_minute: float
    token_burst: int
    max_tokens: int  # completion tokens of one turn, at most
    priority: int  # higher is served first under saturation
    degraded_max_tokens: int
    degrade_at: float
    reject_at: float
    pool: str = DEFAULT_POOL
    degraded_pool: str | None = None

    def __post_init__(self) -> None:
        rates = (self.requests_per_minute, self.tokens_per_minute)
        if not all(0 < rate < math.inf for rate in rates):
            raise ValueError("requests_per_minute and tokens_per_minute must be positive, finite")
        if self.request_burst < 1 or self.token_burst < 1:
            raise ValueError("request_burst and token_burst must be at least 1")
        if not 1 <= self.degraded_max_tokens <= self.max_tokens:
            raise ValueError("degraded_max_tokens must be between 1 and max_tokens")
        if not 0 < self.degrade_at <= self.reject_at:
            raise ValueError("thresholds must satisfy 0 < degrade_at <= reject_at")
        if not self.pool or self.degraded_pool == "":
            raise ValueError("pool names must be non-empty")


DEFAULT_LIMITS: Mapping[Tier, TierLimits] = MappingProxyType(
    {
        Tier.FREE: TierLimits(
            requests_per_minute=20,
            request_burst=5,
            tokens_per_minute=20_000,
            token_burst=8_000,
            max_tokens=512,
            priority=0,
            degraded_max_tokens=256,
            degrade_at=0.5,
            reject_at=0.8,
        ),
        Tier.PLUS: TierLimits(
            requests_per_minute=60,
            request_burst=15,
            tokens_per_minute=100_000,
            token_burst=32_000,
            max_tokens=2048,
            priority=10,
            degraded_max_tokens=1024,
            degrade_at=0.7,
            reject_at=1.0,
        ),
        Tier.ENTERPRISE: TierLimits(
            requests_per_minute=600,
            request_burst=100,
            tokens_per_minute=1_000_000,
            token_burst=200_000,
            max_tokens=4096,
            priority=20,
            degraded_max_tokens=2048,
            degrade_at=0.9,
            reject_at=1.5,  # in flight counts queued turns: enterprise may queue past capacity
        ),
    }
)

_FIELD_TYPES: Mapping[str, tuple[type, ...]] = MappingProxyType(
    {
        "requests_per_minute": (int, float),
        "request_burst": (int,),
        "tokens_per_minute": (int, float),
        "token_burst": (int,),
        "max_tokens": (int,),
        "priority": (int,),
        "degraded_max_tokens": (int,),
        "degrade_at": (int, float),
        "reject_at": (int, float),
        "pool": (str,),
        "degraded_pool": (str, type(None)),
    }
)


@dataclass(frozen=True, slots=True)
class TenantPlan:
    tier: Tier
    limits: TierLimits


class TenantRegistry:
    """Tenant → tier (+ limits). Immutable; build a new one to reload."""

    __slots__ = ("_tenants", "tiers")

    def __init__(
        self,
        tenants: Mapping[str, TenantPlan] | None = None,
        tiers: Mapping[Tier, TierLimits] = DEFAULT_LIMITS,
    ) -> None:
        self.tiers: Mapping[Tier, TierLimits] = MappingProxyType(dict(tiers))
        self._tenants: Mapping[str, TenantPlan] = MappingProxyType(dict(tenants or {}))

    def plan_of(self, tenant: str) -> TenantPlan:
        plan = self._tenants.get(tenant)
        return plan if plan is not None else TenantPlan(Tier.FREE, self.tiers[Tier.FREE])

    def tier_of(self, tenant: str) -> Tier:
        return self.plan_of(tenant).tier

    def limits_for(self, tenant: str) -> TierLimits:
        return self.plan_of(tenant).limits

    def __len__(self) -> int:
        return len(self._tenants)

    @classmethod
    def parse(cls, data: Any, *, source: str = "tenant registry") -> TenantRegistry:
        """Validate a decoded registry document; any fault raises `TenantRegistryError`."""
        doc = _object(data, source)
        _only_keys(doc, {"tiers", "tenants"}, source)
        tiers = dict(DEFAULT_LIMITS)
        for name, overrides in _object(doc.get("tiers", {}), f"{source}: tiers").items():
            tier = _tier(name, f"{source}: tiers")
            tiers[tier] = _override(tiers[tier], overrides, f"{source}: tiers.{name}")
        tenants: dict[str, TenantPlan] = {}
        for tenant, entry in _object(doc.get("tenants", {}), f"{source}: tenants").items():
            where = f"{source}: tenants.{tenant}"
            if not TENANT_ID.fullmatch(tenant):
                raise TenantRegistryError(f"{where}: tenant ids must match {TENANT_ID.pattern}")
            tenants[tenant] = _plan(entry, tiers, where)
        return cls(tenants, tiers)

    @classmethod
    def load(cls, path: str | Path) -> TenantRegistry:
        """The registry in the JSON file at `path`; an empty path: every tenant is free."""
        if not str(path):
            return cls()
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise TenantRegistryError(f"cannot read tenant registry {path}: {err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise TenantRegistryError(f"{path}: not valid JSON: {err}") from None
        return cls.parse(data, source=str(path))


def _plan(entry: Any, tiers: Mapping[Tier, TierLimits], where: str) -> TenantPlan:
    if isinstance(entry, str):
        tier = _tier(entry, where)
        return TenantPlan(tier, tiers[tier])
    fields = _object(entry, where)
    _only_keys(fields, {"tier", "limits"}, where)
    if "tier" not in fields:
        raise TenantRegistryError(f"{where}: needs a tier")
    tier = _tier(fields["tier"], where)
    return TenantPlan(tier, _override(tiers[tier], fields.get("limits", {}), f"{where}.limits"))


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TenantRegistryError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _only_keys(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise TenantRegistryError(f"{where}: unknown keys {unknown} (allowed: {sorted(allowed)})")


def _tier(name: Any, where: str) -> Tier:
    try:
        return Tier(name)
    except ValueError:
        allowed = [t.value for t in Tier]
        raise TenantRegistryError(f"{where}: unknown tier {name!r} (one of {allowed})") from None


def _override(base: TierLimits, overrides: Any, where: str) -> TierLimits:
    overrides = _object(overrides, where)
    _only_keys(overrides, set(_FIELD_TYPES), where)
    for key, value in overrides.items():
        # bool is an int subclass; `true` as a limit is a mistake, not 1
        if isinstance(value, bool) or not isinstance(value, _FIELD_TYPES[key]):
            raise TenantRegistryError(f"{where}.{key}: wrong type {type(value).__name__}")
    try:
        return dataclasses.replace(base, **overrides)
    except ValueError as err:
        raise TenantRegistryError(f"{where}: {err}") from None
