"""workers/runtime/coalescing.py: the first item runs alone at once, what queues while a
batch runs goes together next, errors reach each caller of their batch, a cancelled caller
leaves the others alone."""

from __future__ import annotations

import asyncio
import threading

import pytest

from workers.runtime.coalescing import Coalescing


class Gate:
    """A run_many that records its batches and holds each until released."""

    def __init__(self, fail_on: str = "") -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()
        self.fail_on = fail_on

    def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        self.release.wait(timeout=5)
        if self.fail_on in items:
            raise ValueError(f"bad item {self.fail_on}")
        return [item.upper() for item in items]


async def _until(condition) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_the_first_item_runs_alone_and_the_queued_ones_together():
    gate = Gate()
    runner = Coalescing(gate, max_batch=16)
    first = asyncio.create_task(runner.run("a"))
    await _until(lambda: gate.batches)
    later = [asyncio.create_task(runner.run(x)) for x in "bcd"]
    await asyncio.sleep(0.05)
    gate.release.set()
    assert await first == "A" and [await t for t in later] == ["B", "C", "D"]
    assert gate.batches == [["a"], ["b", "c", "d"]]
    assert (runner.batches, runner.items) == (2, 4)


async def test_batches_are_capped():
    gate = Gate()
    gate.release.set()
    runner = Coalescing(gate, max_batch=2)
    results = await asyncio.gather(*(runner.run(x) for x in "abcde"))
    assert results == ["A", "B", "C", "D", "E"]
    assert all(len(b) <= 2 for b in gate.batches)


async def test_an_error_fails_every_caller_of_its_batch_and_only_those():
    gate = Gate(fail_on="c")
    runner = Coalescing(gate)
    first = asyncio.create_task(runner.run("a"))
    await _until(lambda: gate.batches)
    failing = [asyncio.create_task(runner.run(x)) for x in "bc"]
    await asyncio.sleep(0.05)
    gate.release.set()
    assert await first == "A"
    for task in failing:
        with pytest.raises(ValueError, match="bad item c"):
            await task
    assert await runner.run("e") == "E"  # the runner goes on


async def test_a_cancelled_caller_is_left_out_and_the_others_are_answered():
    gate = Gate()
    runner = Coalescing(gate)
    first = asyncio.create_task(runner.run("a"))
    await _until(lambda: gate.batches)
    gone = asyncio.create_task(runner.run("b"))
    kept = asyncio.create_task(runner.run("c"))
    await asyncio.sleep(0.02)
    gone.cancel()
    await asyncio.sleep(0.02)
    gate.release.set()
    assert await first == "A" and await kept == "C"
    assert gate.batches == [["a"], ["c"]]  # the cancelled item never ran


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(ValueError):
        Coalescing(lambda items: items, max_batch=0)
