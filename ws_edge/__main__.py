"""`python -m ws_edge`: run one edge node until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

import uvloop

from schemas.settings import Settings
from ws_edge.server import EdgeServer


async def main() -> None:
    settings = Settings.from_env()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    edge = EdgeServer(settings)
    await edge.start()
    print(f"edge ready on ws://{settings.edge_host}:{edge.port}/", flush=True)
    try:
        await stop.wait()
    finally:
        await edge.stop()


if __name__ == "__main__":
    uvloop.run(main())
