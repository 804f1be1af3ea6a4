"""`python -m workers.imagegen`: run one image worker until SIGINT/SIGTERM (needs
TURNSTREAM_IMAGEGEN_MODEL_PATH: a diffusers pipeline folder; see docs/imagegen.md)."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from runtime.service_process import start_process
from workers.imagegen.app import load_pipeline, run_imagegen_worker
from workers.runtime.running import serve_until_stopped


async def main() -> None:
    settings, stop = start_process()
    if not settings.imagegen_model_path:
        sys.exit("TURNSTREAM_IMAGEGEN_MODEL_PATH is not set: no image model to serve")
    pipeline = await asyncio.to_thread(load_pipeline, settings)
    async with run_imagegen_worker(settings, pipeline) as running:
        print("imagegen worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
