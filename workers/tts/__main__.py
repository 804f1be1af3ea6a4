"""`python -m workers.tts`: run one TTS worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from runtime.service_process import start_process
from workers.runtime.running import serve_until_stopped
from workers.tts.app import run_tts_worker
from workers.tts.voices import VoiceBook


async def main() -> None:
    settings, stop = start_process()
    voices = VoiceBook()
    await asyncio.to_thread(voices.preload, settings.voice_names)  # no load on the first turn
    async with run_tts_worker(settings, voices) as running:
        print("tts worker ready", flush=True)
        await serve_until_stopped(running, stop)
    if running.failed.is_set():
        sys.exit(1)


if __name__ == "__main__":
    uvloop.run(main())
