"""`python -m workers.sink`: run the ClickHouse sink until SIGINT/SIGTERM."""

from __future__ import annotations

import uvloop

from schemas.service_process import start_process
from workers.sink.app import run_sink


async def main() -> None:
    settings, stop = start_process()
    async with run_sink(settings):
        print("clickhouse sink ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    uvloop.run(main())
