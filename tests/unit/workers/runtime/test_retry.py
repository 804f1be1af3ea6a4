"""Which Kafka and Redis errors `retry_transient` waits out and which it raises."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RequestTimedOutError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from workers.runtime import retry
from workers.runtime.retry import retry_transient

REAL_SLEEP = asyncio.sleep


class InstantAsyncio:
    """What `retry` sees as `asyncio` here: the real module with an instant `sleep`. The patch
    stays in `retry`. Patching `retry.asyncio.sleep`, which is `asyncio.sleep` itself, changed
    it for every task on the session's loop: a full run's session-wide pipeline (its workers'
    offset committers) still runs there, and a committer looped on the no-op sleep without
    ever giving the loop back, which hung CI in this file."""

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(_delay: float) -> None:
        return None


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(retry, "asyncio", InstantAsyncio())


def failing_then_ok(*errors: BaseException):
    calls = []

    async def step() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "sent"

    return step, calls


@pytest.mark.parametrize(
    "error",
    [
        RequestTimedOutError(),
        # a full batch that did not drain in one request timeout (a paused broker):
        # aiokafka calls it not retriable, and a send lost to it lost a turn
        KafkaTimeoutError(),
        RedisConnectionError("gone"),
    ],
)
async def test_outages_are_waited_out(error):
    step, calls = failing_then_ok(error, error)
    assert await retry_transient("sending", step) == "sent"
    assert len(calls) == 3


async def test_permanent_errors_are_raised_at_once():
    step, calls = failing_then_ok(MessageSizeTooLargeError())
    with pytest.raises(MessageSizeTooLargeError):
        await retry_transient("sending", step)
    assert len(calls) == 1


async def test_only_retry_skips_its_backoff():
    """Every other task on the session's loop still sleeps for real."""
    assert asyncio.sleep is REAL_SLEEP
    assert retry.asyncio.sleep is not REAL_SLEEP
