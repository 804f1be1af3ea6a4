"""`python -m workers.inference`: run one inference worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

import uvloop

from schemas.service_process import start_process
from workers.inference.app import build_engine, run_worker

log = logging.getLogger("turnstream.inference")


async def main() -> None:
    settings, stop = start_process()
    log.info("starting engine %s", settings.engine)
    engine = build_engine(settings)
    try:
        async with run_worker(settings, engine) as worker:
            print("inference worker ready", flush=True)
            stopping = asyncio.create_task(stop.wait())
            failing = asyncio.create_task(worker.failed.wait())
            await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            failing.cancel()
            log.info("stopping: draining in-flight turns")
    finally:
        await engine.close()
    if worker.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
