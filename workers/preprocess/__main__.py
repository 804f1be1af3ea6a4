"""`python -m workers.preprocess`: run one preprocessing worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from moderation import profanity
from moderation.categories.classifier import shared
from runtime.service_process import start_process
from workers.preprocess.app import build_speech, run_preprocessor
from workers.runtime.running import serve_until_stopped


async def main() -> None:
    settings, stop = start_process()
    speech = build_speech(settings)
    await asyncio.to_thread(speech.warm)  # the first spoken turn must not pay the model load
    if settings.safety_screening:  # nor the first screened turn (~1.5 s to unpickle)
        await asyncio.to_thread(profanity.load)
        await asyncio.to_thread(shared().warm_up)  # the category model and both encoders
    async with run_preprocessor(settings, speech) as running:
        print("preprocess worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
