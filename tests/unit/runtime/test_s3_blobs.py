"""The S3-compatible blob store over the S3 HTTP API, against moto's S3 server.

moto is an emulator: no real S3-compatible server can run on these machines (MinIO is AGPL
and not served here), so this checks our use of the API (keys, metadata expiry, missing
objects), not a production store. The Redis store is what every pipeline test runs on.
"""

from __future__ import annotations

import boto3
import pytest
from moto.server import ThreadedMotoServer

from runtime.blobs import S3BlobStore, blob_store, sha256_hex
from schemas.channels import RedisNames


@pytest.fixture(scope="module")
def endpoint(monkeypatch_module):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", "test")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        yield patch


@pytest.fixture
def store(endpoint) -> S3BlobStore:
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="media")
    return blob_store(f"s3://media/ts/?endpoint={endpoint}&region=us-east-1", None, RedisNames())


async def test_round_trip_by_content_hash(store: S3BlobStore):
    data = b"\x89PNG not really"
    key = sha256_hex(data)
    assert await store.get(key) is None and not await store.exists(key)
    await store.put(key, data, ttl_s=60)
    await store.put(key, data, ttl_s=60)  # content-addressed: a second put is harmless
    assert await store.get(key) == data and await store.exists(key)


async def test_expired_blobs_read_as_missing(store: S3BlobStore):
    await store.put("old", b"x", ttl_s=-1)
    assert await store.get("old") is None and not await store.exists("old")


def test_unknown_store_urls_are_refused():
    with pytest.raises(ValueError, match="unknown blob store"):
        blob_store("ftp://nope", None, RedisNames())
