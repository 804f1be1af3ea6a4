"""Dropping a benchmark run's namespace: its Kafka topics and Redis keys (each run has its
own, so nothing of it piles up in a developer's broker or Redis). Best effort: a failure
leaves garbage behind, never a failed benchmark."""

from __future__ import annotations

import contextlib

from aiokafka.admin import AIOKafkaAdminClient

from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames

UNLINK_BATCH = 5000


async def drop_namespace(settings: Settings) -> None:
    with contextlib.suppress(Exception):
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            mine = [t for t in await admin.list_topics() if t.startswith(settings.namespace + ".")]
            if mine:
                await admin.delete_topics(mine)
        finally:
            await admin.close()
    with contextlib.suppress(Exception):
        redis = redis_client(settings.redis_url)
        try:
            prefix = RedisNames.for_namespace(settings.namespace).prefix
            batch: list[bytes] = []
            async for key in redis.scan_iter(match=f"{prefix}:*", count=UNLINK_BATCH):
                batch.append(key)
                if len(batch) >= UNLINK_BATCH:
                    await redis.unlink(*batch)
                    batch = []
            if batch:
                await redis.unlink(*batch)
        finally:
            await redis.aclose()
