"""The Redis-list work queue on the real Redis: the queue stays bounded, and workers that
share it handle each item exactly once between them."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from harness.polling import eventually
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.codec import encode
from schemas.events import TurnCancelled
from workers.runtime.work_list import WorkListLoop, push

pytestmark = pytest.mark.integration


def item(n: int) -> bytes:
    return encode(TurnCancelled(turn_id=f"t{n}", conversation_id="c"))


async def test_a_queue_nobody_pops_keeps_only_its_newest_items(services: Settings):
    redis = redis_client(services.redis_url)
    key = f"test:worklist:{uuid.uuid4().hex[:8]}"
    try:
        for n in range(25):
            await push(redis, key, item(n), cap=10)
        kept = await redis.lrange(key, 0, -1)
        assert len(kept) == 10
        assert kept[0] == item(24) and kept[-1] == item(15)
    finally:
        await redis.delete(key)
        await redis.aclose()


async def test_two_workers_handle_each_item_once(services: Settings):
    key = f"test:worklist:{uuid.uuid4().hex[:8]}"
    handled: Counter[str] = Counter()
    by_worker: Counter[int] = Counter()
    clients = [redis_client(services.redis_url) for _ in range(3)]
    producer, *workers = clients

    def handler(worker: int):
        async def handle(event) -> None:
            await asyncio.sleep(0.002)
            handled[event.turn_id] += 1
            by_worker[worker] += 1

        return handle

    loops = [
        WorkListLoop(redis, key, handler(i), max_inflight=4, batch=4)
        for i, redis in enumerate(workers)
    ]
    tasks = [asyncio.create_task(loop.run()) for loop in loops]
    try:
        for n in range(200):
            await push(producer, key, item(n), cap=10_000)
        await eventually(lambda: sum(handled.values()) >= 200, timeout_s=30, every_s=0.05)
        await asyncio.sleep(0.2)  # nothing handled twice arrives late
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.delete(key)
        for redis in clients:
            await redis.aclose()
    assert set(handled) == {f"t{n}" for n in range(200)}
    assert set(handled.values()) == {1}
    assert all(by_worker[i] > 0 for i in range(2)), by_worker  # both took a share
