"""`python -m workers.inference`: run one inference worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

import uvloop

from schemas.settings import Settings
from workers.inference.app import build_engine, run_worker

log = logging.getLogger("turnstream.inference")


async def main() -> None:
    settings = Settings.from_env()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
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
