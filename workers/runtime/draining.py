"""Stopping work in flight: let it finish for a while, then cancel what is left."""

from __future__ import annotations

import asyncio
from collections.abc import Collection


async def finish_or_cancel(tasks: Collection[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait up to `timeout_s` for `tasks`, cancel those still running, and wait for them to
    end (`timeout_s=0`: cancel at once, as a crash would leave them)."""
    if tasks and timeout_s > 0:
        await asyncio.wait(tasks, timeout=timeout_s)
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
