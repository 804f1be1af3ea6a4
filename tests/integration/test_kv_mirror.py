"""The worker's KV mirror against vLLM's own event publisher (its `ZmqEventPublisher`, no
engine) and real Redis: batches published before the mirror joined are replayed from the
publisher's buffer; batches the buffer no longer holds make the mirror forget, not guess;
evictions leave the set; the mirror says it is followed only once the engine's hashes were
checked to be ours."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import pytest

from harness.polling import eventually
from runtime.kv_blocks import block_hashes
from runtime.redis import redis_client
from runtime.settings import Settings
from workers.inference.kv_mirror import KvEventSource, KvMirror

BLOCK = 16


def tokens(n: int) -> list[int]:
    return list(range(1000 * n, 1000 * n + 2 * BLOCK))  # two full blocks, prompt n


@contextlib.contextmanager
def publisher(folder: Path, buffer_steps: int):
    from vllm.distributed.kv_events import ZmqEventPublisher

    pub = ZmqEventPublisher(
        data_parallel_rank=0,
        endpoint=f"ipc://{folder}/events",
        replay_endpoint=f"ipc://{folder}/replay",
        buffer_steps=buffer_steps,
        topic="kv",
    )
    try:
        yield pub
    finally:
        pub.shutdown()


def store(pub, n: int) -> list[int]:
    """Publish one batch storing prompt n's two blocks, as an engine does; its hashes."""
    from vllm.distributed.kv_events import BlockStored, KVEventBatch

    hashes = block_hashes(tokens(n), BLOCK)
    stored = BlockStored(
        block_hashes=hashes,
        parent_block_hash=None,
        token_ids=tokens(n),
        block_size=BLOCK,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    pub.publish(KVEventBatch(ts=0.0, events=[stored]))
    return hashes


def evict(pub, hashes: list[int]) -> None:
    from vllm.distributed.kv_events import BlockRemoved, KVEventBatch

    pub.publish(KVEventBatch(ts=0.0, events=[BlockRemoved(block_hashes=hashes, medium="GPU")]))


@contextlib.asynccontextmanager
async def mirroring(settings: Settings, folder: Path):
    redis = redis_client(settings.redis_url)
    key = f"test-kv-mirror:{uuid.uuid4().hex}"
    source = KvEventSource(
        endpoint=f"ipc://{folder}/events",
        replay_endpoint=f"ipc://{folder}/replay",
        topic="kv",
        block_size=BLOCK,
        hash_seed="vllm-none-hash",
    )
    mirror = KvMirror(source=source, redis=redis, key=key, flush_s=0.05, ttl_s=5)
    task = asyncio.create_task(mirror.run())
    try:
        await asyncio.sleep(0.5)  # the subscription reaches the publisher
        yield mirror, redis, key
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert not await redis.exists(key)  # a stopped mirror takes its blocks with it
        await redis.aclose()


async def members(redis, key: str) -> set[int]:
    return {int(h) for h in await redis.smembers(key)}


@pytest.mark.timeout(120)
async def test_a_late_mirror_replays_what_it_missed_and_follows_evictions(
    services: Settings, tmp_path: Path
):
    with publisher(tmp_path, buffer_steps=100) as pub:
        first, second = store(pub, 1), store(pub, 2)  # before anyone listens: lost
        await asyncio.sleep(0.3)
        async with mirroring(services, tmp_path) as (mirror, redis, key):
            third = store(pub, 3)
            want = set(first + second + third)
            await eventually(lambda: _is(redis, key, want), timeout_s=20)
            assert mirror.index.resets == 0 and mirror.index.next_seq == 3
            assert mirror.state() is not None and mirror.state().blocks == 6
            evict(pub, second)
            await eventually(lambda: _is(redis, key, set(first + third)), timeout_s=20)


@pytest.mark.timeout(120)
async def test_batches_the_publisher_no_longer_holds_make_the_mirror_forget(
    services: Settings, tmp_path: Path
):
    with publisher(tmp_path, buffer_steps=1) as pub:
        store(pub, 1)  # missed, and the buffer keeps only the last
        store(pub, 2)
        await asyncio.sleep(0.3)
        async with mirroring(services, tmp_path) as (mirror, redis, key):
            third = store(pub, 3)
            await eventually(lambda: mirror.index.next_seq == 3, timeout_s=20)
            await eventually(lambda: _is(redis, key, set(third)), timeout_s=20)
            assert mirror.index.resets == 1  # claims only what it saw, not batch 1's blocks


async def _is(redis, key: str, want: set[int]) -> bool:
    return await members(redis, key) == want
