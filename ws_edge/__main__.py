"""`python -m ws_edge`: run one edge node until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio

import uvloop

from runtime.cancelling import cancel_and_wait
from runtime.heap import HeapKeeper, HeapPolicy
from runtime.service_process import start_process
from ws_edge.server import EdgeServer


async def main() -> None:
    settings, stop = start_process()
    edge = EdgeServer(settings)
    await edge.start()
    # the process's own heap, so here and not in EdgeServer (tests run edges in-process)
    heap = asyncio.create_task(HeapKeeper(HeapPolicy(settings.edge_heap_freeze_s)).run())
    print(f"edge ready on ws://{settings.edge_host}:{edge.port}/", flush=True)
    try:
        await stop.wait()
    finally:
        await cancel_and_wait([heap])
        await edge.stop()


if __name__ == "__main__":
    uvloop.run(main())
