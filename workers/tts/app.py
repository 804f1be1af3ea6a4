"""Wiring of the TTS worker: settings → voices, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from runtime.settings import Settings
from schemas.ids import now_ms
from schemas.topics import TTS_SEGMENTS
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService
from workers.tts.service import TtsConfig, TtsService
from workers.tts.voices import VoiceBook

CONSUMER_GROUP = "tts"


@contextlib.asynccontextmanager
async def run_tts_worker(
    settings: Settings, voices: VoiceBook | None = None
) -> AsyncIterator[RunningService[TtsService]]:
    clients = WorkerClients.build(settings, CONSUMER_GROUP, TTS_SEGMENTS)
    service = TtsService(
        redis=clients.redis,
        relay=clients.relay,
        voices=voices or VoiceBook(),
        names=clients.names,
        config=TtsConfig(worker_id=clients.worker_id, concurrency=settings.tts_concurrency),
        clock_ms=now_ms,
    )
    # Pieces beyond the synthesis slots wait in the loop (a few seconds of speech each);
    # more than that stays in Kafka.
    loop = clients.consume_loop(
        service.handle, service.fail_piece, max_inflight=8 * settings.tts_concurrency
    )
    async with clients.run(service, loop, cancels=service.listen_for_cancels()) as running:
        yield running
