"""`python -m workers.audit`: run the audit worker until SIGINT/SIGTERM (needs
TURNSTREAM_AUDIT_MODEL_PATH: a Llama Guard model folder)."""

from __future__ import annotations

import sys

import uvloop

from schemas.service_process import start_process
from workers.audit.app import AuditNotConfigured, run_auditor
from workers.runtime.running import serve_until_stopped


async def main() -> None:
    settings, stop = start_process()
    try:
        async with run_auditor(settings) as running:
            print("audit worker ready", flush=True)
            await serve_until_stopped(running, stop)
    except AuditNotConfigured as err:
        sys.exit(f"audit worker: {err}")
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
