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


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    """`retry.asyncio` is the asyncio module: the patch is seen by every task on the session's
    loop. So it still yields (sleep(0)); a no-op that never suspends hung CI once: a task
    left by an earlier test looped on `await asyncio.sleep(interval)` without ever giving
    the loop back."""

    async def instant(_delay: float) -> None:
        await REAL_SLEEP(0)

    monkeypatch.setattr(retry.asyncio, "sleep", instant)


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
