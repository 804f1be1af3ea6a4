"""`python -m workers.preprocess`: run one preprocessing worker until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

import uvloop

from schemas.service_process import start_process
from workers.preprocess.app import run_preprocessor
from workers.runtime.running import serve_until_stopped


async def main() -> None:
    settings, stop = start_process()
    async with run_preprocessor(settings) as running:
        print("preprocess worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
