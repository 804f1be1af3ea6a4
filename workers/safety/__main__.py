"""`python -m workers.safety`: run one safety worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from moderation.screen import OutputCheck, SafetyConfig
from runtime.service_process import start_process
from workers.runtime.running import serve_until_stopped
from workers.safety.app import run_safety_worker


async def main() -> None:
    settings, stop = start_process()
    check = OutputCheck(SafetyConfig(categories=settings.safety_categories))
    await asyncio.to_thread(check.warm_up)  # the first window must not pay the model load
    async with run_safety_worker(settings, check) as running:
        print("safety worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
