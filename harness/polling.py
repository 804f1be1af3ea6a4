"""Waiting for state outside the test's control (a table, another process) to come true."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 60, every_s: float = 0.1
) -> None:
    """Poll `check` until it is true; TimeoutError after `timeout_s`. The deadline is also
    checked between polls: `asyncio.timeout` cancels once, and a client that swallows that
    cancellation (inside an awaited check) would otherwise leave the loop polling forever."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            if loop.time() >= deadline:
                raise TimeoutError(f"not true after {timeout_s} s")
            await asyncio.sleep(every_s)
