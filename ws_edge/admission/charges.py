"""Tokens owed by tenants once their turns end, written to the shared buckets in batches.

Why: a turn's real cost is known when it ends, and each end used to run a rate-limit script
call of its own (a task, a pooled Redis connection, a 1 s timeout). When thousands of answers
end together (10k streams finishing at 2,000 a second, `bench.connections`, 2026-12-07) the
calls queued behind the edge's 64 Redis connections, and 17% of the answers were never
counted. Ends now add to a per-tenant sum in memory (`OwedTokens`, pure); one writer sends
every tenant's sum in one pipelined round trip after a short linger (a charge only has to
land before the tenant's next admissions, which already took their estimates). A failed
write keeps the sums and retries with a backoff, so a Redis outage delays charges instead of
dropping them. What is lost: sums still owed when the edge stops and its last write fails
(logged with the amount), and, the other way, a write that timed out after Redis had run it
is counted twice (the tenant waits a little longer; never a free answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ws_edge.admission.rate_limit import RateLimiter
from ws_edge.admission.tiers import TierLimits
from ws_edge.auth import TENANT_ID

log = logging.getLogger("turnstream.edge.admission")


@dataclass(slots=True)
class Owed:
    """What one tenant owes (negative: a refund), and the limits of its latest turn."""

    tenant: str
    limits: TierLimits
    tokens: int


class OwedTokens:
    """Per-tenant sums not yet written."""

    def __init__(self) -> None:
        self._owed: dict[str, Owed] = {}

    def add(self, tenant: str, limits: TierLimits, tokens: int) -> None:
        owed = self._owed.get(tenant)
        if owed is None:
            self._owed[tenant] = Owed(tenant, limits, tokens)
        else:
            owed.tokens += tokens
            owed.limits = limits

    def take(self) -> list[Owed]:
        """Everything owed (sums that cancelled out left behind), emptied."""
        taken = [owed for owed in self._owed.values() if owed.tokens != 0]
        self._owed = {}
        return taken

    def restore(self, owed: Iterable[Owed]) -> None:
        """Put back sums a write did not deliver; a tenant's newer limits win."""
        for each in owed:
            newer = self._owed.get(each.tenant)
            self.add(each.tenant, newer.limits if newer else each.limits, each.tokens)

    @property
    def tokens(self) -> int:
        return sum(abs(owed.tokens) for owed in self._owed.values())

    def __len__(self) -> int:
        return len(self._owed)


class ChargeWriter:
    """Writes `OwedTokens` to the buckets: one pipelined round trip per `linger_s`, at most;
    after a failure, again after `retry_s` (doubling up to `max_retry_s`)."""

    def __init__(
        self,
        limiter: RateLimiter,
        *,
        linger_s: float,
        retry_s: float = 0.5,
        max_retry_s: float = 30.0,
    ) -> None:
        self._limiter = limiter
        self._linger_s = linger_s
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self.owed = OwedTokens()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.writes = 0  # round trips that delivered
        self.failed_writes = 0
        self._failing = False

    def add(self, tenant: str, limits: TierLimits, tokens: int) -> None:
        if tokens == 0:
            return
        if not TENANT_ID.fullmatch(tenant):  # checked here: the writer's batch must not fail on it
            raise ValueError(f"tenant id must match {TENANT_ID.pattern}")
        self.owed.add(tenant, limits, tokens)
        self._wakeup.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="edge-charges")

    async def close(self) -> None:
        """Write what is owed (one last try, the limiter's timeout bounds it), then stop."""
        self._stopping = True
        self._stop.set()
        self._wakeup.set()
        if self._task is not None:
            await self._task
            self._task = None
        elif len(self.owed):
            await self._write_once()
        if len(self.owed):
            log.warning(
                "%d tokens of %d tenants not counted: the edge stopped before Redis took them",
                self.owed.tokens,
                len(self.owed),
            )

    async def _run(self) -> None:
        backoff = self._retry_s
        while not (self._stopping and not len(self.owed)):
            await self._wakeup.wait()
            self._wakeup.clear()
            await self._pause(self._linger_s)
            if await self._write_once():
                backoff = self._retry_s
                continue
            if self._stopping:
                return
            await self._pause(backoff)
            backoff = min(2 * backoff, self._max_retry_s)
            self._wakeup.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless the edge is stopping (then its last write goes at once)."""
        if seconds > 0 and not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._stop.wait()

    async def _write_once(self) -> bool:
        batch = self.owed.take()
        if not batch:
            return True
        try:
            await self._limiter.charge_many([(o.tenant, o.limits, o.tokens) for o in batch])
        except Exception as err:  # RateLimitUnavailable, or a bug: keep the sums either way
            self.owed.restore(batch)
            self.failed_writes += 1
            if not self._failing:  # once per outage, not per retry
                log.warning("charging %d tenants' tokens failed, will retry: %s", len(batch), err)
            self._failing = True
            return False
        if self._failing:
            log.info("charges written again after %d failed writes", self.failed_writes)
        self._failing = False
        self.writes += 1
        return True
