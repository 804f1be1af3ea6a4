"""`python -m ws_edge`: run one edge node until SIGINT/SIGTERM."""

from __future__ import annotations

import uvloop

from runtime.service_process import start_process
from ws_edge.server import EdgeServer


async def main() -> None:
    settings, stop = start_process()
    edge = EdgeServer(settings)
    await edge.start()
    print(f"edge ready on ws://{settings.edge_host}:{edge.port}/", flush=True)
    try:
        await stop.wait()
    finally:
        await edge.stop()


if __name__ == "__main__":
    uvloop.run(main())
