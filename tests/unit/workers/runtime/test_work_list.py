"""The Redis-list work queue's loop, with an in-memory list: each item handled once,
`max_inflight` at once, bad items and failing handlers never stop it, a Redis outage is
waited out. (On the real Redis: tests/integration/test_work_list.py.)"""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from harness.polling import eventually
from schemas.codec import encode
from schemas.events import TurnCancelled
from workers.runtime import work_list
from workers.runtime.work_list import WorkListLoop


class MemoryList:
    """The slice of redis.asyncio.Redis that WorkListLoop pops with (BLMPOP, RIGHT)."""

    def __init__(self, items: list[bytes], failures: int = 0) -> None:
        self.items = list(items)  # left = newest, as LPUSH leaves them
        self.failures = failures
        self.pops = 0

    async def blmpop(self, block_s, numkeys, *keys, direction, count):
        self.pops += 1
        if self.failures:
            self.failures -= 1
            raise RedisConnectionError("Redis is restarting")
        if not self.items:
            await asyncio.sleep(0.01)  # like a blocking pop that waited and got nothing
            return None
        assert direction == "RIGHT"
        taken = self.items[-count:][::-1]
        del self.items[-count:]
        return [keys[0].encode(), taken]


def item(n: int) -> bytes:
    return encode(TurnCancelled(turn_id=f"t{n}", conversation_id="c"))


async def run_until(loop: WorkListLoop, done) -> None:
    task = asyncio.create_task(loop.run())
    try:
        await eventually(done, timeout_s=5, every_s=0.005)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await loop.drain(timeout_s=1)


async def test_items_are_handled_oldest_first_and_at_most_max_inflight_at_once():
    handled: list[str] = []
    running = peak = 0

    async def handle(event) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        handled.append(event.turn_id)
        running -= 1

    queue = MemoryList([item(n) for n in reversed(range(10))])  # t0 pushed first
    loop = WorkListLoop(queue, "q", handle, max_inflight=3, batch=4)
    await run_until(loop, lambda: len(handled) == 10)
    assert sorted(handled, key=lambda t: int(t[1:])) == [f"t{n}" for n in range(10)]
    assert handled[0] in {"t0", "t1", "t2"}  # the oldest are taken first
    assert peak == 3


async def test_a_bad_item_or_a_failing_handler_does_not_stop_the_loop():
    handled: list[str] = []
    failed: list[tuple[str, str]] = []

    async def handle(event) -> None:
        if event.turn_id == "t1":
            raise RuntimeError("a bug")
        handled.append(event.turn_id)

    async def on_failure(event, reason: str) -> None:
        failed.append((event.turn_id, reason))

    queue = MemoryList([item(2), item(1), b"not an event", item(0)])
    loop = WorkListLoop(queue, "q", handle, max_inflight=2, on_failure=on_failure)
    await run_until(loop, lambda: len(handled) == 2)
    assert handled == ["t0", "t2"]
    assert failed == [("t1", "RuntimeError('a bug')")]


async def test_a_redis_outage_is_waited_out(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(work_list, "RETRY_S", 0.01)
    handled: list[str] = []

    async def handle(event) -> None:
        handled.append(event.turn_id)

    queue = MemoryList([item(0)], failures=2)
    loop = WorkListLoop(queue, "q", handle, max_inflight=1)
    await run_until(loop, lambda: handled == ["t0"])
    assert queue.pops >= 3
