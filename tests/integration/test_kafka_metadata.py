"""Clients re-read the metadata of their own topics only, on the real broker: an idle
producer's periodic refresh reads no topic (aiokafka's own reads the whole cluster), its
first send adds its topic, a consumer tracks its subscription, and an explicit request for
everything still gets everything."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from runtime.settings import Settings
from workers.runtime.kafka import make_consumer, make_producer

pytestmark = pytest.mark.integration


@pytest.fixture
async def two_topics(services: Settings):
    prefix = f"test-md-{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}.a", f"{prefix}.b"]
    admin = AIOKafkaAdminClient(bootstrap_servers=services.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]
        )
        yield names
        await admin.delete_topics(names)
    finally:
        await admin.close()


async def test_an_idle_producer_reads_no_topic_until_it_sends(services: Settings, two_topics):
    ours = make_producer(services, "md-test")
    plain = AIOKafkaProducer(bootstrap_servers=services.kafka_bootstrap)
    await ours.start()
    await plain.start()
    try:
        await ours.client.force_metadata_update()
        await plain.client.force_metadata_update()
        assert set(two_topics) <= plain.client.cluster.topics()  # aiokafka's: the cluster
        assert ours.client.cluster.topics() == set()
        assert ours.client.cluster.brokers()  # the brokers still come back

        await ours.send_and_wait(two_topics[0], b"x")
        await ours.client.force_metadata_update()
        assert ours.client.cluster.topics() == {two_topics[0]}

        everything = await ours.client.fetch_all_metadata()
        assert set(two_topics) <= everything.topics()
    finally:
        await ours.stop()
        await plain.stop()


async def test_a_consumer_tracks_its_subscription_only(services: Settings, two_topics):
    consumer = make_consumer(services, f"md-test-{uuid.uuid4().hex[:6]}", "md-test")
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        assert consumer._client.cluster.topics() == set()
        consumer.subscribe([two_topics[1]])
        await consumer._client.force_metadata_update()
        assert consumer._client.cluster.topics() == {two_topics[1]}
    finally:
        await consumer.stop()
