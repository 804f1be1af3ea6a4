"""Wiring of the preprocessing worker: settings → models, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from schemas.blobs import RedisBlobStore
from schemas.channels import RedisNames, redis_client
from schemas.ids import make_instance_id, now_ms
from schemas.settings import Settings
from schemas.topics import DEAD_LETTERS, TURNS_COMPLETED, TURNS_ENRICHED, TURNS_SUBMITTED
from workers.preprocess.service import PreprocessConfig, PreprocessService
from workers.preprocess.speech import SpeechPipeline
from workers.preprocess.vision import VisionPipeline
from workers.runtime.consumer import ConsumerLoop
from workers.runtime.kafka import make_consumer, make_producer
from workers.runtime.outcome import OutcomeRecorder
from workers.runtime.relay import RelayPublisher
from workers.runtime.running import RunningService, run_service

log = logging.getLogger("turnstream.preprocess")

CONSUMER_GROUP = "preprocess"


def build_speech(settings: Settings) -> SpeechPipeline:
    """Loads the VAD and ASR models (a few hundred ms): build once per process."""
    return SpeechPipeline.load(
        max_seconds=settings.max_audio_s,
        max_bytes=settings.max_media_bytes,
        asr_threads=settings.asr_threads,
    )


@contextlib.asynccontextmanager
async def run_preprocessor(
    settings: Settings, speech: SpeechPipeline | None = None
) -> AsyncIterator[RunningService[PreprocessService]]:
    worker_id = make_instance_id("preprocess", settings.worker_id)
    names = RedisNames.for_namespace(settings.namespace)
    redis = redis_client(settings.redis_url)
    blobs = RedisBlobStore(redis, names)
    producer = make_producer(settings.kafka_bootstrap, worker_id)
    submitted = TURNS_SUBMITTED.full_name(settings.namespace)
    consumer = make_consumer(
        settings.kafka_bootstrap,
        f"{submitted}.{CONSUMER_GROUP}",
        worker_id,
        settings.fetch_max_wait_ms,
    )
    relay = RelayPublisher(redis)
    service = PreprocessService(
        redis=redis,
        producer=producer,
        relay=relay,
        blobs=blobs,
        speech=speech or build_speech(settings),
        images=VisionPipeline.from_settings(settings, blobs),
        outcomes=OutcomeRecorder(
            redis=redis,
            producer=producer,
            relay=relay,
            names=names,
            completed_topic=TURNS_COMPLETED.full_name(settings.namespace),
        ),
        names=names,
        config=PreprocessConfig(
            worker_id=worker_id, enriched_topic=TURNS_ENRICHED.full_name(settings.namespace)
        ),
        clock_ms=now_ms,
    )
    loop = ConsumerLoop(
        consumer,
        producer,
        service.handle,
        topics=[submitted],
        deadletter_topic=DEAD_LETTERS.full_name(settings.namespace),
        max_inflight=settings.max_preprocess_inflight,
        on_failure=service.fail_turn,
    )
    async with run_service(
        service, loop=loop, relay=relay, redis=redis, producer=producer, consumer=consumer
    ) as running:
        yield running
