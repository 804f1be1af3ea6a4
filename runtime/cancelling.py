"""Stopping tasks so that they do stop: cancel, and cancel again while one is still running.

A cancellation is delivered once. Python 3.11's `asyncio.wait_for` drops it when the awaited
operation finishes in the same loop step (CPython gh-86296; redis-py 8 sends that way when
a socket timeout is set, so `runtime.redis` sets none, and ruff bans `asyncio.wait_for` in
our own code), and the task goes on as if nothing had asked it to stop: a loop
such as the worker state board's then runs for ever, and whoever awaits it after one
`cancel()` waits for ever (a CI run's test teardown hung 300 s on it, 2026-12-06). Cancelling
again until the task ends is what anyio's level cancellation does for every library at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger("turnstream.cancelling")

RECANCEL_S = 0.5  # how long a cancelled task may take before it is cancelled again


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future], *, recancel_s: float = RECANCEL_S
) -> None:
    """Cancel `tasks` and wait until every one has ended, cancelling again each `recancel_s`
    those still running (their cancellation was swallowed). Their results and errors are
    dropped: the caller is stopping them."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    rounds = 0
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=recancel_s)
        rounds += 1
        if pending and rounds == 1:
            log.warning(
                "%d task(s) still running %.1f s after a cancel, cancelling again: %s",
                len(pending),
                recancel_s,
                [_name(task) for task in pending][:5],
            )
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit


async def stop_despite_cancels(task: asyncio.Future) -> None:
    """`cancel_and_wait([task])` from a `finally` that may itself be cancelled again: it
    waits until `task` has ended anyway and then raises the cancel that came meanwhile. Cut
    short, a task that swallowed its cancel (gh-86296) would run for ever (`ConsumerLoop.run`
    stops its committer this way while `run_service` re-cancels `run` after 0.5 s)."""
    stopping = asyncio.ensure_future(cancel_and_wait([task]))
    cancelled = False
    while not stopping.done():
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _name(task: asyncio.Future) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
