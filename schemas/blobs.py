"""Content-addressed blob store for media: the edge puts uploads, workers get them.

Large media never rides inside Kafka messages; events carry the sha256 instead. Blobs expire
(TTL) because they only need to outlive the turn's processing and its retries. Redis is the
default store; anything with `put`/`get`/`exists` (an S3-compatible bucket, say) fits the same
`BlobStore` interface.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from redis.asyncio import Redis

from schemas.channels import RedisNames


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore(Protocol):
    async def put(self, key: str, data: bytes, *, ttl_s: int) -> None:
        """Store `data` under `key` (idempotent: the same key always holds the same bytes)."""

    async def get(self, key: str) -> bytes | None:
        """The bytes under `key`, or None when they expired or never existed."""

    async def exists(self, key: str) -> bool: ...


class RedisBlobStore:
    """Blobs as Redis strings (`RedisNames.blob_key`). A put of a key that exists only
    refreshes its TTL (content addressing: the bytes are the same), so a popular image is
    sent over the network once."""

    def __init__(self, redis: Redis, names: RedisNames) -> None:
        self._redis = redis
        self._key = names.blob_key

    async def put(self, key: str, data: bytes, *, ttl_s: int) -> None:
        name = self._key(key)
        if not await self._redis.expire(name, ttl_s):
            await self._redis.set(name, data, ex=ttl_s)

    async def get(self, key: str) -> bytes | None:
        return await self._redis.get(self._key(key))

    async def exists(self, key: str) -> bool:
        return bool(await self._redis.exists(self._key(key)))
