"""The clients every worker role needs, built the same way from settings.

A role names its consumer group and input topic; it gets its instance id, Redis (names,
client, blob store), a producer, a consumer, the relay to the edges and the outcome recorder,
and builds its consume loop from them. `run` starts and stops it all (`running.run_service`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from redis.asyncio import Redis

from runtime.blobs import BlobStore, blob_store
from runtime.instance_id import make_instance_id
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.topics import DEAD_LETTERS, TOOLS_REQUESTED, TURNS_COMPLETED, TopicSpec
from workers.runtime.consumer import ConsumerLoop, Handler
from workers.runtime.kafka import make_consumer, make_producer
from workers.runtime.outcome import OutcomeRecorder
from workers.runtime.relay import LogLimits, RelayPublisher
from workers.runtime.running import RunningService, run_service


@dataclass
class WorkerClients:
    settings: Settings
    worker_id: str
    input_topic: str
    names: RedisNames
    redis: Redis
    blobs: BlobStore
    producer: AIOKafkaProducer
    consumer: AIOKafkaConsumer
    relay: RelayPublisher
    outcomes: OutcomeRecorder

    @classmethod
    def build(cls, settings: Settings, role: str, source: TopicSpec) -> WorkerClients:
        worker_id = make_instance_id(role, settings.worker_id)
        names = RedisNames.for_namespace(settings.namespace)
        redis = redis_client(settings.redis_url)
        producer = make_producer(settings, worker_id)
        topic = source.full_name(settings.namespace)
        consumer = make_consumer(settings, f"{topic}.{role}", worker_id)
        relay = RelayPublisher(
            redis,
            names,
            limits=LogLimits(
                max_entries=settings.resume_max_entries,
                live_ttl_s=settings.resume_history_s,
                done_ttl_s=settings.resume_after_done_s,
            ),
            pace_s=settings.delta_pace_ms / 1000,
        )
        outcomes = OutcomeRecorder(
            redis=redis,
            producer=producer,
            relay=relay,
            names=names,
            completed_topic=TURNS_COMPLETED.full_name(settings.namespace),
            tools_topic=TOOLS_REQUESTED.full_name(settings.namespace),
        )
        return cls(
            settings,
            worker_id,
            topic,
            names,
            redis,
            blob_store(settings.blob_store_url, redis, names),
            producer,
            consumer,
            relay,
            outcomes,
        )

    def topic(self, spec: TopicSpec) -> str:
        return spec.full_name(self.settings.namespace)

    def consume_loop(self, handler: Handler, on_failure, max_inflight: int) -> ConsumerLoop:
        return ConsumerLoop(
            self.consumer,
            self.producer,
            handler,
            topics=[self.input_topic],
            deadletter_topic=self.topic(DEAD_LETTERS),
            max_inflight=max_inflight,
            on_failure=on_failure,
        )

    @contextlib.asynccontextmanager
    async def run(self, service, loop: ConsumerLoop, **background) -> AsyncIterator[RunningService]:
        async with run_service(
            service,
            loop=loop,
            relay=self.relay,
            redis=self.redis,
            producer=self.producer,
            consumer=self.consumer,
            background=background,
        ) as running:
            yield running
