"""Pure pieces of native multimodal inference: placeholder binding, the image cache with
per-user quotas, the prefill image budget."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from schemas.events import Message, Role
from workers.inference.engines.engine import EngineError
from workers.inference.images.image_budget import ImageBudget
from workers.inference.images.image_cache import ImageCache
from workers.inference.images.placeholders import NEUTRALISED, bind_images


def test_placeholders_of_the_query_become_image_tokens_and_history_stays_text():
    messages = [
        Message(Role.USER, "<image_1>\nold picture"),
        Message(Role.ASSISTANT, "a cat"),
        Message(Role.USER, "<image_1>\n<image_2>\ncompare these"),
    ]
    bound = bind_images(messages, 2, "<image>")
    assert bound[0].content == "<image_1>\nold picture"
    assert bound[2].content == "<image>\n<image>\ncompare these"


def test_a_typed_image_token_cannot_open_an_image_slot():
    messages = [Message(Role.USER, "<image> sneaky <image_1> real")]
    assert bind_images(messages, 1, "<image>")[0].content == f"{NEUTRALISED} sneaky <image> real"
    assert bind_images(messages, 0, "<image>")[0].content.count("<image>") == 0


@pytest.mark.parametrize(
    ("text", "count"), [("<image_1> only one", 2), ("no placeholder", 1), ("<image_2> x", 1)]
)
def test_placeholders_and_images_must_match_one_to_one(text, count):
    with pytest.raises(EngineError) as err:
        bind_images([Message(Role.USER, text)], count, "<image>")
    assert err.value.code == "image_placeholder_mismatch"


def tensor(kb: int) -> np.ndarray:
    return np.zeros(kb * 256, np.float32)  # kb KiB


def test_cache_hits_and_lru_eviction():
    cache = ImageCache(max_bytes=3 * 1024, per_user_bytes=3 * 1024)
    for key in "abc":
        cache.put(key, tensor(1), owner="u")
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", tensor(1), owner="v")
    assert "b" not in cache and {"a", "c", "d"} <= {k for k in "abcd" if k in cache}
    assert cache.get("zz") is None
    assert (cache.stats.hits, cache.stats.misses) == (1, 1) and cache.stats.hit_rate == 0.5


def test_a_user_over_quota_evicts_only_their_own_entries():
    cache = ImageCache(max_bytes=10 * 1024, per_user_bytes=2 * 1024)
    cache.put("victim", tensor(1), owner="alice")
    for i in range(20):  # a flood of distinct images from one client
        cache.put(f"flood-{i}", tensor(1), owner="mallory")
    assert "victim" in cache
    assert cache.used_by("mallory") == 2 * 1024 and cache.used_by("alice") == 1024
    cache.put("huge", tensor(3), owner="alice")  # over anyone's quota: not cached
    assert "huge" not in cache


async def test_budget_queues_big_requests_first_come_first_served():
    budget = ImageBudget(max_images=4)
    order: list[str] = []
    release = {name: asyncio.Event() for name in "abc"}

    async def request(name: str, images: int) -> None:
        async with budget.prefill(images):
            order.append(name)
            await release[name].wait()

    first = asyncio.create_task(request("a", 3))
    await asyncio.sleep(0)
    second = asyncio.create_task(request("b", 5))  # over the budget: runs alone, when free
    third = asyncio.create_task(request("c", 1))  # fits now, but b came first
    await asyncio.sleep(0.01)
    assert order == ["a"] and budget.in_prefill == 3
    release["a"].set()
    await asyncio.sleep(0.01)
    assert order == ["a", "b"] and budget.in_prefill == 4
    release["b"].set()
    release["c"].set()
    await asyncio.gather(first, second, third)
    assert order == ["a", "b", "c"] and budget.in_prefill == 0


async def test_a_cancelled_waiter_leaves_no_budget_behind():
    budget = ImageBudget(max_images=1)
    hold = asyncio.Event()

    async def request() -> None:
        async with budget.prefill(1):
            await hold.wait()

    running = asyncio.create_task(request())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    hold.set()
    await running
    assert budget.in_prefill == 0
    async with budget.prefill(1):
        assert budget.in_prefill == 1
