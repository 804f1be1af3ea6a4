"""Stopping a task whose first cancellation was swallowed (as Python 3.11's `wait_for` does
when the awaited operation finishes in the same step: redis-py's reads and writes)."""

from __future__ import annotations

import asyncio
import contextlib

from runtime.cancelling import cancel_and_wait


async def swallows_one_cancel(stopped: list[str]) -> None:
    """A loop like the state board's: the first cancel is lost inside a library call."""
    try:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed, as the library did
            await asyncio.sleep(10)
        await asyncio.Event().wait()  # the loop goes on until cancelled again
    finally:
        stopped.append("cleanup ran")


async def test_a_task_that_swallowed_its_cancel_is_cancelled_again_until_it_ends():
    stopped: list[str] = []
    task = asyncio.create_task(swallows_one_cancel(stopped))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait([task], recancel_s=0.05), 5)
    assert task.cancelled() and stopped == ["cleanup ran"]


async def test_one_cancel_is_not_enough_for_such_a_task():
    """The control: what `task.cancel(); await task` did before."""
    stopped: list[str] = []
    task = asyncio.create_task(swallows_one_cancel(stopped))
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=0.2)
    assert not done  # still running
    await cancel_and_wait([task], recancel_s=0.05)


async def test_finished_and_failed_tasks_are_left_as_they_are():
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    finished = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait([failed, finished])
    assert isinstance(failed.exception(), ValueError) and not finished.cancelled()
