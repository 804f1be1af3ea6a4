import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from schemas.events import TurnCancelled
from workers.runtime.consumer import ConsumerLoop


def loop_with(handler) -> ConsumerLoop:
    # The Kafka clients are not touched by the retry logic under test.
    return ConsumerLoop(None, None, handler, topics=["t"], deadletter_topic="d", max_inflight=1)


async def test_outages_are_retried_until_the_handler_succeeds():
    calls = []

    async def flaky(event):
        calls.append(event)
        if len(calls) < 3:
            raise RedisConnectionError("redis restarting")

    event = TurnCancelled(turn_id="t1", conversation_id="c")
    await loop_with(flaky)._handle_with_retries(event)
    assert calls == [event] * 3


async def test_handler_bugs_are_not_retried():
    calls = []

    async def buggy(event):
        calls.append(event)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await loop_with(buggy)._handle_with_retries(TurnCancelled(turn_id="t", conversation_id="c"))
    assert len(calls) == 1
