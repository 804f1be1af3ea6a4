"""`python -m workers.sink`: run the ClickHouse sink until SIGINT/SIGTERM; with the
embedded engine it also serves the ClickHouse HTTP interface on 127.0.0.1 (the only way in
while it owns the data directory)."""

from __future__ import annotations

import contextlib

import uvloop

from runtime.service_process import start_process
from workers.sink.app import run_sink
from workers.sink.http.server import serve_http, serves_http


async def main() -> None:
    settings, stop = start_process()
    async with run_sink(settings), contextlib.AsyncExitStack() as extras:
        if serves_http(settings):
            try:
                url = await extras.enter_async_context(serve_http(settings))
                print(f"clickhouse http interface on {url}", flush=True)
            except OSError as err:  # e.g. the port is taken: sink anyway, analysts wait
                print(f"clickhouse http interface off: {err}", flush=True)
        print("clickhouse sink ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    uvloop.run(main())
