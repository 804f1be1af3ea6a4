"""The project's Redis client against real Redis: a task cancelled while it talks to Redis
ends cancelled, whenever the cancel lands (redis-py 8's default socket timeout sends
through `asyncio.wait_for`, which on Python 3.11 loses a cancel that arrives as the send
completes: the KV mirror's stop hung)."""

from __future__ import annotations

import asyncio
import random
import uuid

from runtime.redis import redis_client
from runtime.settings import Settings

TRIES = 60


async def test_a_task_cancelled_mid_command_ends_cancelled(services: Settings):
    redis = redis_client(services.redis_url)
    key = f"test-cancel:{uuid.uuid4().hex}"
    rng = random.Random(7)

    async def commands(stop: asyncio.Event) -> None:
        while not stop.is_set():
            await redis.set(key, "1", px=5000)
            async with redis.pipeline(transaction=True) as pipe:
                pipe.sadd(f"{key}:set", 1, 2, 3)
                pipe.pexpire(f"{key}:set", 5000)
                await pipe.execute()

    lost = 0
    try:
        for _ in range(TRIES):
            stop = asyncio.Event()
            task = asyncio.create_task(commands(stop))
            await asyncio.sleep(rng.uniform(0, 0.01))
            task.cancel()
            await asyncio.wait([task], timeout=2)
            if not task.cancelled():
                lost += 1
                stop.set()  # a cancel may be lost again: end it by its own loop
                await asyncio.wait([task], timeout=2)
    finally:
        await redis.delete(key, f"{key}:set")
        await redis.aclose()
    assert lost == 0, f"{lost} of {TRIES} cancels lost"
