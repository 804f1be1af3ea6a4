"""Wiring of the inference worker: settings → engine, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from schemas.blobs import RedisBlobStore
from schemas.channels import RedisNames, redis_client
from schemas.ids import make_instance_id, now_ms
from schemas.settings import Settings
from schemas.topics import DEAD_LETTERS, TURNS_ASSEMBLED, TURNS_COMPLETED
from workers.inference.engine import Engine
from workers.inference.image_budget import ImageBudget
from workers.inference.image_cache import ImageCache
from workers.inference.pixels import PixelLoader
from workers.inference.service import InferenceService, ServiceConfig
from workers.runtime.consumer import ConsumerLoop
from workers.runtime.kafka import make_consumer, make_producer
from workers.runtime.outcome import OutcomeRecorder
from workers.runtime.relay import RelayPublisher
from workers.runtime.running import RunningService, run_service

log = logging.getLogger("turnstream.inference")

CONSUMER_GROUP = "inference"


def build_engine(settings: Settings) -> Engine:
    """The configured engine: real vLLM by default, the fake for pipeline benchmarks."""
    if settings.engine == "fake":
        from workers.inference.fake_engine import FakeEngine

        return FakeEngine(token_interval_s=settings.fake_token_interval_ms / 1000)
    from infra.models.smollm2 import default_model_dir
    from workers.inference.vllm_engine import VllmEngine, VllmOptions

    path = settings.model_path or str(default_model_dir(settings))
    return VllmEngine(
        VllmOptions(
            model_path=path,
            model_name=settings.model_name,
            dtype=settings.dtype,
            kv_cache_bytes=settings.kv_cache_bytes,
            max_model_len=settings.max_model_len,
            max_num_seqs=settings.max_inflight_turns,
            max_images_per_prompt=settings.max_images_per_turn,
        )
    )


RunningWorker = RunningService[InferenceService]


@contextlib.asynccontextmanager
async def run_worker(settings: Settings, engine: Engine) -> AsyncIterator[RunningWorker]:
    """Start the worker's tasks; on exit drain in-flight turns and close every client."""
    worker_id = make_instance_id("inference", settings.worker_id)
    names = RedisNames.for_namespace(settings.namespace)
    redis = redis_client(settings.redis_url)
    producer = make_producer(settings.kafka_bootstrap, worker_id)
    consumer = make_consumer(
        settings.kafka_bootstrap,
        TURNS_ASSEMBLED.full_name(settings.namespace) + "." + CONSUMER_GROUP,
        worker_id,
        settings.fetch_max_wait_ms,
    )
    relay = RelayPublisher(redis)
    service = InferenceService(
        engine=engine,
        redis=redis,
        producer=producer,
        relay=relay,
        pixels=PixelLoader(
            RedisBlobStore(redis, names),
            ImageCache(
                max_bytes=settings.image_cache_bytes,
                per_user_bytes=settings.image_cache_user_bytes,
            ),
        ),
        image_budget=ImageBudget(settings.max_prefill_images),
        outcomes=OutcomeRecorder(
            redis=redis,
            producer=producer,
            relay=relay,
            names=names,
            completed_topic=TURNS_COMPLETED.full_name(settings.namespace),
        ),
        names=names,
        config=ServiceConfig(
            worker_id=worker_id,
            max_queued_per_conversation=settings.max_queued_per_conversation,
        ),
        clock_ms=now_ms,
    )
    loop = ConsumerLoop(
        consumer,
        producer,
        service.handle,
        topics=[TURNS_ASSEMBLED.full_name(settings.namespace)],
        deadletter_topic=DEAD_LETTERS.full_name(settings.namespace),
        max_inflight=settings.max_inflight_turns,
        on_failure=service.fail_turn,
    )
    async with run_service(
        service,
        loop=loop,
        relay=relay,
        redis=redis,
        producer=producer,
        consumer=consumer,
        background={"cancels": service.listen_for_cancels()},
    ) as running:
        yield running
