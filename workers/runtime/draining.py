"""Stopping work in flight: let it finish for a while, then cancel what is left."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from runtime.cancelling import cancel_and_wait


async def finish_or_cancel(tasks: Collection[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait up to `timeout_s` for `tasks`, cancel those still running, and wait for them to
    end (`timeout_s=0`: cancel at once, as a crash would leave them)."""
    if tasks and timeout_s > 0:
        await asyncio.wait(tasks, timeout=timeout_s)
    await cancel_and_wait(tasks)
