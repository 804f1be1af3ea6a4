"""Ended turns' tokens: summed per tenant, written in batches, kept through failed writes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from harness.polling import eventually
from ws_edge.admission.charges import ChargeWriter, OwedTokens
from ws_edge.admission.tiers import DEFAULT_LIMITS, Tier
from ws_edge.errors import RateLimitUnavailable

FREE = DEFAULT_LIMITS[Tier.FREE]
PLUS = dataclasses.replace(FREE, token_burst=FREE.token_burst * 2)


class Buckets:
    """The limiter's `charge_many`, in memory; `failing` calls raise as a dead Redis does."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = {}
        self.calls: list[list[tuple[str, object, int]]] = []
        self.failing = 0

    async def charge_many(self, charges):
        await asyncio.sleep(0)
        if self.failing:
            self.failing -= 1
            raise RateLimitUnavailable("rate limiter: Redis did not answer")
        self.calls.append(list(charges))
        for tenant, _, tokens in charges:
            self.levels[tenant] = self.levels.get(tenant, 0) + tokens
        return list(self.levels.values())


def test_sums_per_tenant_and_empties_on_take():
    owed = OwedTokens()
    owed.add("a", FREE, 10)
    owed.add("b", FREE, 5)
    owed.add("a", PLUS, -3)
    taken = {o.tenant: (o.limits, o.tokens) for o in owed.take()}
    assert taken == {"a": (PLUS, 7), "b": (FREE, 5)}  # the latest limits
    assert owed.take() == [] and len(owed) == 0


def test_a_sum_that_cancels_out_is_not_written():
    owed = OwedTokens()
    owed.add("a", FREE, 4)
    owed.add("a", FREE, -4)
    assert owed.take() == []


def test_restored_sums_add_to_what_came_since_and_keep_the_newer_limits():
    owed = OwedTokens()
    owed.add("a", FREE, 10)
    failed = owed.take()
    owed.add("a", PLUS, 2)
    owed.restore(failed)
    [again] = owed.take()
    assert (again.tenant, again.limits, again.tokens) == ("a", PLUS, 12)


async def test_ends_within_the_linger_share_one_write():
    buckets = Buckets()
    writer = ChargeWriter(buckets, linger_s=0.05)  # type: ignore[arg-type]
    writer.start()
    for i in range(200):
        writer.add(f"t{i % 3}", FREE, 10)
        if i % 50 == 0:
            await asyncio.sleep(0.001)  # ends arrive over a few ms, inside the linger
    await eventually(lambda: bool(buckets.calls), timeout_s=5)
    assert buckets.levels == {"t0": 670, "t1": 670, "t2": 660}
    assert len(buckets.calls) == 1 and len(buckets.calls[0]) == 3  # one write, one call each
    await writer.close()
    assert len(buckets.calls) == 1


async def test_a_failed_write_is_retried_and_nothing_is_lost():
    buckets = Buckets()
    buckets.failing = 2
    writer = ChargeWriter(buckets, linger_s=0, retry_s=0.01)  # type: ignore[arg-type]
    writer.start()
    writer.add("a", FREE, 7)
    await eventually(lambda: bool(buckets.calls), timeout_s=5)
    writer.add("a", FREE, 1)
    await writer.close()
    assert buckets.levels == {"a": 8}
    assert writer.failed_writes == 2


async def test_what_is_owed_when_the_edge_stops_is_written_then(caplog):
    buckets = Buckets()
    writer = ChargeWriter(buckets, linger_s=60)  # type: ignore[arg-type]
    writer.start()
    writer.add("a", FREE, 5)
    await writer.close()  # does not wait out the linger
    assert buckets.levels == {"a": 5}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_last_write_that_fails_says_what_was_not_counted(caplog):
    buckets = Buckets()
    buckets.failing = 10
    writer = ChargeWriter(buckets, linger_s=60)  # type: ignore[arg-type]
    writer.start()
    writer.add("a", FREE, 5)
    writer.add("b", FREE, 2)
    with caplog.at_level(logging.WARNING, logger="turnstream.edge.admission"):
        await writer.close()
    assert buckets.levels == {}
    assert "7 tokens of 2 tenants not counted" in caplog.text


def test_a_malformed_tenant_is_refused_when_added_not_in_the_batch():
    writer = ChargeWriter(Buckets(), linger_s=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        writer.add("not a tenant!", FREE, 1)
    assert len(writer.owed) == 0


async def test_stopping_during_an_outage_does_not_wait_out_the_backoff(caplog):
    buckets = Buckets()
    buckets.failing = 100
    writer = ChargeWriter(buckets, linger_s=0, retry_s=3600)  # type: ignore[arg-type]
    writer.start()
    writer.add("a", FREE, 5)
    await eventually(lambda: writer.failed_writes >= 1, timeout_s=5)
    with caplog.at_level(logging.WARNING, logger="turnstream.edge.admission"):
        await asyncio.wait_for(writer.close(), timeout=60)  # a hang guard: not after the backoff
    assert "5 tokens of 1 tenants not counted" in caplog.text
