"""Waiting for state outside the test's control (a table, another process) to come true."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 60, every_s: float = 0.1
) -> None:
    """Poll `check` until it is true; TimeoutError after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(every_s)
