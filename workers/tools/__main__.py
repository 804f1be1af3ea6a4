"""`python -m workers.tools`: run one tools worker until SIGINT/SIGTERM (the MCP servers
in TURNSTREAM_MCP_SERVERS, each tenant's tools in TURNSTREAM_TOOL_ALLOW; docs/tools.md)."""

from __future__ import annotations

import sys

import uvloop

from runtime.service_process import start_process
from workers.runtime.running import serve_until_stopped
from workers.tools.app import mcp_servers, run_tools_worker


async def main() -> None:
    settings, stop = start_process()
    servers = mcp_servers(settings)
    await servers.start()
    try:
        async with run_tools_worker(settings, servers) as running:
            print("tools worker ready", flush=True)
            await serve_until_stopped(running, stop)
    finally:
        await servers.close()
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
