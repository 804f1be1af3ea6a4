"""Per-tenant token buckets in Redis, shared by every edge node.

Each tenant has two buckets, `{prefix}:rl:{<tenant>}:requests` and `...:tokens` (the braces
are a Redis Cluster hash tag: both keys of a tenant live on one shard, so one script may touch
both). A bucket is a hash {level, at_ms}; it refills continuously at `*_per_minute` up to its
burst. One Lua script reads, refills and takes atomically, timed by the Redis server's TIME,
so edge nodes with skewed clocks agree. After a write the key expires when the bucket would
be full again, so an idle bucket vanishes exactly when a fresh (full) one is equivalent.

`admit` checks both buckets in one script call and takes from both only if both have enough:
a refusal takes nothing. A turn's token estimate larger than the burst is admitted once the
bucket is full, and takes the whole estimate (the level goes negative). `charge` adds the
tokens counted after the fact (the answer's real completion tokens); it never refuses, and
may leave the bucket in debt, so a tenant who overspent waits until it refills past zero.
Negative `charge` refunds (capped at the burst).

Redis failures raise `RateLimitUnavailable` (a `StoreUnavailable`); the caller decides to fail
open (admit without limits) or closed (refuse).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ws_edge.admission.tiers import TierLimits
from ws_edge.auth import TENANT_ID
from ws_edge.errors import RateLimited, RateLimitUnavailable

Reason = Literal["requests", "tokens"]
_REASONS: dict[int, Reason] = {1: "requests", 2: "tokens"}

# KEYS: requests bucket, tokens bucket.
# ARGV: mode ("admit" | "charge"), req capacity, req refill per ms, req cost,
#       tok capacity, tok refill per ms, tok cost.
# Returns {allowed 0|1, reason 0|1 requests|2 tokens, retry_after_ms, req level, tok level}.
BUCKETS_LUA = """
local EPS = 1e-6
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

local function level(key, cap, rate)
  local v = redis.call('HMGET', key, 'level', 'at_ms')
  local lvl, at = tonumber(v[1]), tonumber(v[2])
  if lvl == nil or at == nil then return cap end
  local elapsed = math.max(now - at, 0)
  return math.min(cap, lvl + elapsed * rate)
end

local function store(key, lvl, cap, rate)
  redis.call('HSET', key, 'level', string.format('%.17g', lvl), 'at_ms',
             string.format('%.17g', now))
  redis.call('PEXPIRE', key, string.format('%d', math.ceil((cap - lvl) / rate) + 1000))
end

local function wait(lvl, need, rate)
  if lvl + EPS >= need then return 0 end
  return math.ceil((need - lvl) / rate)
end

local mode = ARGV[1]
local rcap, rrate, rcost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tcap, trate, tcost = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local rq = level(KEYS[1], rcap, rrate)
local tk = level(KEYS[2], tcap, trate)

if mode == 'charge' then
  tk = math.min(tk - tcost, tcap)
  store(KEYS[2], tk, tcap, trate)
  return {1, 0, 0, math.floor(rq), math.floor(tk)}
end

local rwait = wait(rq, math.min(rcost, rcap), rrate)
local twait = wait(tk, math.min(tcost, tcap), trate)
if rwait > 0 or twait > 0 then
  local reason = 1
  if twait > rwait then reason = 2 end
  return {0, reason, math.max(rwait, twait), math.floor(rq), math.floor(tk)}
end
rq = rq - rcost
tk = tk - tcost
store(KEYS[1], rq, rcap, rrate)
store(KEYS[2], tk, tcap, trate)
return {1, 0, 0, math.floor(rq), math.floor(tk)}
"""


@dataclass(frozen=True, slots=True)
class Admission:
    """The outcome of `admit`. Refused: `reason` names the bucket that waits longest, and
    `retry_after_ms` is when both would have enough (if nobody else takes first)."""

    allowed: bool
    retry_after_ms: int = 0
    reason: Reason | None = None
    remaining_requests: int = 0  # bucket levels after the call, rounded down (may be < 0)
    remaining_tokens: int = 0

    def raise_if_refused(self) -> None:
        if not self.allowed:
            raise RateLimited(
                f"rate limit on {self.reason}: retry after {self.retry_after_ms} ms",
                retry_after_ms=self.retry_after_ms,
                reason=self.reason or "requests",
            )


class RateLimiter:
    """The shared buckets. `timeout_s` bounds each call: a hung Redis is a failure too."""

    def __init__(self, redis: Redis, prefix: str = "ts", *, timeout_s: float = 1.0) -> None:
        self._redis = redis
        self._prefix = prefix
        self._timeout_s = timeout_s
        self._script = redis.register_script(BUCKETS_LUA)  # EVALSHA, SCRIPT LOAD on NOSCRIPT

    def key(self, tenant: str, kind: Reason) -> str:
        return f"{self._prefix}:rl:{{{tenant}}}:{kind}"

    async def admit(self, tenant: str, limits: TierLimits, *, estimated_tokens: int) -> Admission:
        """Take one request and `estimated_tokens` tokens, or nothing (see module doc)."""
        if estimated_tokens < 0:
            raise ValueError("estimated_tokens must not be negative")
        allowed, reason, retry_ms, requests, tokens = await self._run(
            "admit", tenant, limits, 1, estimated_tokens
        )
        return Admission(
            allowed=bool(allowed),
            retry_after_ms=int(retry_ms),
            reason=_REASONS.get(int(reason)),
            remaining_requests=int(requests),
            remaining_tokens=int(tokens),
        )

    async def charge(self, tenant: str, limits: TierLimits, tokens: int) -> int:
        """Take `tokens` more (negative: refund) without refusing; returns the token level."""
        *_, level = await self._run("charge", tenant, limits, 0, tokens)
        return int(level)

    async def charge_many(self, charges: Sequence[tuple[str, TierLimits, int]]) -> list[int]:
        """`charge` for several tenants in one pipelined round trip (each tenant's buckets
        are still updated atomically); the token levels, in order."""
        async with self._answered(), self._redis.pipeline(transaction=False) as pipe:
            for tenant, limits, tokens in charges:
                keys, args = self._call("charge", tenant, limits, 0, tokens)
                await self._script(keys=keys, args=args, client=pipe)
            answers = await pipe.execute()
        return [int(level) for *_, level in answers]

    async def _run(
        self, mode: str, tenant: str, limits: TierLimits, requests: int, tokens: int
    ) -> list[int]:
        keys, args = self._call(mode, tenant, limits, requests, tokens)
        async with self._answered():
            return await self._script(keys=keys, args=args)

    @contextlib.asynccontextmanager
    async def _answered(self) -> AsyncIterator[None]:
        """Bounds a call by `timeout_s`; Redis failing or silent → `RateLimitUnavailable`."""
        try:
            async with asyncio.timeout(self._timeout_s):
                yield
        except (RedisError, OSError, TimeoutError) as err:
            raise RateLimitUnavailable(f"rate limiter: Redis did not answer: {err!r}") from err

    def _call(
        self, mode: str, tenant: str, limits: TierLimits, requests: int, tokens: int
    ) -> tuple[list[str], list[str | int]]:
        if not TENANT_ID.fullmatch(tenant):
            raise ValueError(f"tenant id must match {TENANT_ID.pattern}")
        keys = [self.key(tenant, "requests"), self.key(tenant, "tokens")]
        args: list[str | int] = [
            mode,
            limits.request_burst,
            repr(limits.requests_per_minute / 60_000),
            requests,
            limits.token_burst,
            repr(limits.tokens_per_minute / 60_000),
            tokens,
        ]
        return keys, args
