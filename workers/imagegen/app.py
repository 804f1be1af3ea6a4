"""Wiring of the image worker: settings → pipeline, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from moderation.image_screen import ImageScreen
from runtime.settings import Settings
from runtime.state_board import StateBoard
from schemas.ids import now_ms
from schemas.topics import IMAGES_REQUESTED, TTS_SEGMENTS
from workers.imagegen.pipeline import DiffusersPipeline, ImagePipeline
from workers.imagegen.presence import POOL, presence_state
from workers.imagegen.request import ImageLimits
from workers.imagegen.service import ImageGenConfig, ImageGenService
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService

CONSUMER_GROUP = "imagegen"


def load_pipeline(settings: Settings) -> ImagePipeline:
    """The configured pipeline (blocking, seconds to minutes: call it in a thread)."""
    return DiffusersPipeline(
        settings.imagegen_model_path,
        name=settings.imagegen_model_name,
        device=settings.imagegen_device,
        dtype=settings.imagegen_dtype,
        cpu_threads=settings.imagegen_threads,
    )


def image_config(settings: Settings, worker_id: str, speech_topic: str = "") -> ImageGenConfig:
    return ImageGenConfig(
        worker_id=worker_id,
        limits=ImageLimits(
            width=settings.imagegen_width,
            height=settings.imagegen_height,
            steps=settings.imagegen_steps,
            min_side=settings.imagegen_min_side,
            max_side=settings.imagegen_max_side,
            max_steps=settings.imagegen_max_steps,
        ),
        guidance=settings.imagegen_guidance,
        preview_every=settings.imagegen_preview_every,
        preview_side=settings.imagegen_preview_side,
        blob_ttl_s=settings.media_ttl_s,
        speech_topic=speech_topic,
    )


@contextlib.asynccontextmanager
async def run_imagegen_worker(
    settings: Settings, pipeline: ImagePipeline
) -> AsyncIterator[RunningService[ImageGenService]]:
    clients = WorkerClients.build(settings, CONSUMER_GROUP, IMAGES_REQUESTED)
    service = ImageGenService(
        pipeline=pipeline,
        redis=clients.redis,
        producer=clients.producer,
        relay=clients.relay,
        outcomes=clients.outcomes,
        blobs=clients.blobs,
        names=clients.names,
        config=image_config(settings, clients.worker_id, clients.topic(TTS_SEGMENTS)),
        clock_ms=now_ms,
        image_screen=ImageScreen.from_settings(settings),
    )
    # One image at a time per pipeline; a few more wait in the loop, the rest in Kafka.
    loop = clients.consume_loop(service.handle, service.fail_turn, max_inflight=4)
    background = {"cancels": service.listen_for_cancels()}
    if settings.worker_state_interval_ms > 0:
        presence = StateBoard(
            redis=clients.redis,
            key=clients.names.worker_states_key(POOL),
            worker_id=clients.worker_id,
            state=presence_state(
                service=service,
                consumer=clients.consumer,
                topic=clients.input_topic,
                worker_id=clients.worker_id,
                clock_ms=now_ms,
            ),
            interval_s=settings.worker_state_interval_ms / 1000,
            ttl_s=settings.worker_state_ttl_ms / 1000,
        )
        background["presence"] = presence.run()
    async with clients.run(service, loop, **background) as running:
        yield running
