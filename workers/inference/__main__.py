"""`python -m workers.inference`: run one inference worker until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import sys

import uvloop

from runtime.service_process import start_process
from workers.inference.app import build_engine, run_worker
from workers.runtime.running import serve_until_stopped

log = logging.getLogger("turnstream.inference")


async def main() -> None:
    settings, stop = start_process()
    log.info("starting engine %s", settings.engine)
    engine = build_engine(settings)
    try:
        async with run_worker(settings, engine) as worker:
            print("inference worker ready", flush=True)
            await serve_until_stopped(worker, stop)
    finally:
        await engine.close()
    if worker.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
