"""Content-addressed blob store for media: the edge puts uploads, workers get them.

Large media never rides inside Kafka messages; events carry the sha256 instead. Blobs expire
(TTL) because they only need to outlive the turn's processing and its retries. Redis is the
default store; an S3-compatible bucket is the option (`TURNSTREAM_BLOB_STORE_URL=s3://…`),
behind the same small `BlobStore` interface.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

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
        value = await self._redis.get(self._key(key))
        return value.encode() if isinstance(value, str) else value

    async def exists(self, key: str) -> bool:
        return bool(await self._redis.exists(self._key(key)))


class S3BlobStore:
    """Blobs as objects of an S3-compatible bucket (AWS S3, MinIO, Ceph…), `{prefix}{key}`.

    S3 has no per-object TTL: each object carries its expiry time in its metadata and a
    read past it returns None (as Redis would); deleting expired objects is the bucket's
    lifecycle rule (a day granularity). boto3 is synchronous: calls run in threads.
    Credentials come from the usual AWS environment variables or files.
    """

    def __init__(self, client, bucket: str, prefix: str = "") -> None:
        self._client = client
        self._bucket = bucket
        self._prefix = prefix

    @classmethod
    def from_url(cls, url: str) -> S3BlobStore:
        """`s3://bucket/prefix/?endpoint=http://127.0.0.1:9000&region=us-east-1`."""
        import boto3

        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        client = boto3.client(
            "s3", endpoint_url=query.get("endpoint"), region_name=query.get("region")
        )
        return cls(client, parts.netloc, parts.path.lstrip("/"))

    async def put(self, key: str, data: bytes, *, ttl_s: int) -> None:
        expires = str(int(time.time()) + ttl_s)
        await asyncio.to_thread(
            self._client.put_object,
            Bucket=self._bucket,
            Key=self._prefix + key,
            Body=data,
            Metadata={"expires-at": expires},
        )

    async def get(self, key: str) -> bytes | None:
        try:
            obj = await asyncio.to_thread(
                self._client.get_object, Bucket=self._bucket, Key=self._prefix + key
            )
        except self._client.exceptions.NoSuchKey:
            return None
        if _expired(obj.get("Metadata", {})):
            return None
        return await asyncio.to_thread(obj["Body"].read)

    async def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            head = await asyncio.to_thread(
                self._client.head_object, Bucket=self._bucket, Key=self._prefix + key
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return False
            raise
        return not _expired(head.get("Metadata", {}))


def _expired(metadata: dict[str, str]) -> bool:
    expires = metadata.get("expires-at")
    return expires is not None and int(expires) <= time.time()


def blob_store(url: str, redis: Redis, names: RedisNames) -> BlobStore:
    """The configured store: Redis by default, an S3-compatible bucket for `s3://…`."""
    if url.startswith("s3://"):
        return S3BlobStore.from_url(url)
    if url:
        raise ValueError(f"unknown blob store {url!r}: use empty (Redis) or s3://bucket/prefix")
    return RedisBlobStore(redis, names)
