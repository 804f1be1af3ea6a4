"""Wiring of the preprocessing worker: settings → models, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from moderation.blacklist import RedisBlacklist
from moderation.image_screen import ImageScreen
from moderation.input_gate import InputGate
from moderation.screen import InputScreen, SafetyConfig
from runtime import whisper_models
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir
from schemas.ids import now_ms
from schemas.topics import TURNS_ENRICHED, TURNS_SUBMITTED
from workers.preprocess import text_language
from workers.preprocess.sentence_end import SentenceEnd
from workers.preprocess.service import PreprocessConfig, PreprocessService
from workers.preprocess.speech import SpeechPool
from workers.preprocess.vision import VisionPipeline
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService

CONSUMER_GROUP = "preprocess"


def build_speech(settings: Settings) -> SpeechPool:
    """The VAD and ASR models (a few hundred ms each to load): build once per process."""
    return SpeechPool.load(
        settings.asr_workers,
        max_seconds=settings.max_audio_s,
        max_bytes=settings.max_media_bytes,
        asr_threads=settings.asr_threads,
        short_window=settings.asr_short_window,
        model_path=asr_model_path(settings),
    )


def asr_model_path(settings: Settings) -> Path:
    """The Whisper folder the setting names."""
    return whisper_models.asr_model_path(settings.asr_model, settings.state_path / "models")


def build_sentence_end(settings: Settings) -> SentenceEnd | None:
    """The text model that judges the voice loop's guesses (None: off); it loads on the
    first guess that asks for it (`SentenceEnd.judges`)."""
    if not settings.sentence_end_model:
        return None
    return SentenceEnd(default_model_dir(settings))


def build_gate(settings: Settings, clients: WorkerClients) -> InputGate | None:
    """The input screen (None when screening is off); its profanity model loads on first
    use, or earlier through `warm_screen`."""
    if not settings.safety_screening:
        return None
    config = SafetyConfig(
        input_profanity_threshold=settings.safety_input_threshold,
        categories=settings.safety_categories,
    )
    blacklist = RedisBlacklist(clients.redis, prefix=clients.names.prefix)
    return InputGate(
        screen=InputScreen(config, blacklist=blacklist),
        checker=clients.worker_id,
        clock_ms=now_ms,
    )


@contextlib.asynccontextmanager
async def run_preprocessor(
    settings: Settings, speech: SpeechPool | None = None
) -> AsyncIterator[RunningService[PreprocessService]]:
    text_language.warm()  # before joining the group: a worker without its model stops here
    clients = WorkerClients.build(settings, CONSUMER_GROUP, TURNS_SUBMITTED)
    sentence_end = build_sentence_end(settings)
    service = PreprocessService(
        redis=clients.redis,
        producer=clients.producer,
        relay=clients.relay,
        blobs=clients.blobs,
        speech=speech or build_speech(settings),
        images=VisionPipeline.from_settings(
            settings, clients.blobs, ImageScreen.from_settings(settings)
        ),
        outcomes=clients.outcomes,
        names=clients.names,
        config=PreprocessConfig(
            worker_id=clients.worker_id, enriched_topic=clients.topic(TURNS_ENRICHED)
        ),
        clock_ms=now_ms,
        gate=build_gate(settings, clients),
        sentence_end=sentence_end,
    )
    loop = clients.consume_loop(service.handle, service.fail_turn, settings.max_preprocess_inflight)
    try:
        async with clients.run(service, loop) as running:
            yield running
    finally:
        await service.images.aclose()
