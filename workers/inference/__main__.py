"""`python -m workers.inference`: run one inference worker until SIGINT/SIGTERM."""

from __future__ import annotations

import logging

import uvloop

from schemas.service_process import start_process
from workers.inference.app import build_engine, run_worker

log = logging.getLogger("turnstream.inference")


async def main() -> None:
    settings, stop = start_process()
    log.info("starting engine %s", settings.engine)
    engine = build_engine(settings)
    try:
        async with run_worker(settings, engine):
            print("inference worker ready", flush=True)
            await stop.wait()
            log.info("stopping: draining in-flight turns")
    finally:
        await engine.close()


if __name__ == "__main__":
    uvloop.run(main())
