"""The local services as the project's scripts set them up: topics from the registry,
ClickHouse migrations on the real (embedded) engine."""

from __future__ import annotations

import asyncio
import textwrap
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from harness.chdb import check_in_fresh_engine
from runtime.kafka_topics import ensure_topics
from schemas.topics import REGISTRY

pytestmark = pytest.mark.integration


async def test_topics_are_created_from_the_registry_idempotently(services):
    namespace = f"topics-{uuid.uuid4().hex[:6]}"
    created = await ensure_topics(services.kafka_bootstrap, namespace)
    assert sorted(created) == sorted(spec.full_name(namespace) for spec in REGISTRY)
    assert await ensure_topics(services.kafka_bootstrap, namespace) == []
    admin = AIOKafkaAdminClient(bootstrap_servers=services.kafka_bootstrap)
    await admin.start()
    try:
        described = {d["topic"]: d for d in await admin.describe_topics(created)}
        configs = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in created]
        )
    finally:
        await admin.close()
    for spec in REGISTRY:
        assert len(described[spec.full_name(namespace)]["partitions"]) == spec.partitions
    retention = {
        resource[3]: {entry[0]: entry[1] for entry in resource[4]}["retention.ms"]
        for response in configs
        for resource in response.resources
    }
    for spec in REGISTRY:
        assert retention[spec.full_name(namespace)] == str(spec.retention_ms)


async def test_broker_refuses_to_auto_create_topics(services):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    producer = AIOKafkaProducer(bootstrap_servers=services.kafka_bootstrap, request_timeout_ms=3000)
    await producer.start()
    try:
        with pytest.raises((KafkaError, TimeoutError)):
            await asyncio.wait_for(producer.send_and_wait(f"typo-{uuid.uuid4().hex[:6]}", b"x"), 5)
    finally:
        await producer.stop()


MIGRATION_CHECK = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import MigrationError, Migration, migrate
    import runtime.clickhouse.migrate as m
    from runtime.settings import Settings
    from workers.sink.rows import TURN_COLUMNS

    client = connect(Settings.from_env())
    first = migrate(client)
    again = migrate(client)
    assert [x.version for x in first] == [x.version for x in m.load_migrations()], first
    assert again == []
    client.insert("turnstream.turns", [["t1", "c1", "acme", "u", "m", "w", "stop", "", 5, 3, 0,
                  1.0, 12.5, 40.0, [1.5, 2.5], "hi", datetime.now(UTC)]],
                  column_names=list(TURN_COLUMNS))
    rows = client.query("SELECT turn_id, itl_ms, ttft_ms FROM turnstream.turns").result_rows
    assert rows[0][0] == "t1" and list(rows[0][1]) == [1.5, 2.5], rows
    original = m.load_migrations
    m.load_migrations = lambda: [Migration(1, "turns", "SELECT 1")]  # edited after applying
    try:
        migrate(client)
    except MigrationError as err:
        assert "changed after it was applied" in str(err)
    else:
        sys.exit("checksum drift not detected")
    print("ok")
""")


def test_migrations_apply_once_on_the_embedded_engine(tmp_path):
    check_in_fresh_engine(MIGRATION_CHECK, tmp_path)
