"""`python -m workers.audit`: run the audit worker until SIGINT/SIGTERM (Llama Guard from
TURNSTREAM_AUDIT_MODEL_PATH when set, else the category classifier)."""

from __future__ import annotations

import sys

import uvloop

from runtime.service_process import start_process
from workers.audit.app import run_auditor
from workers.runtime.running import serve_until_stopped


async def main() -> None:
    settings, stop = start_process()
    async with run_auditor(settings) as running:
        print("audit worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
