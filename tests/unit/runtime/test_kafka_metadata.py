"""A client's periodic metadata refresh with no tracked topic asks for none (aiokafka asks
for the whole cluster's); an explicit request for everything still asks for everything."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka.client import AIOKafkaClient

from runtime.kafka_delivery import DeliveringProducer
from runtime.kafka_metadata import NamedTopicsClient, named_topics_only


class _Conn:
    def __init__(self) -> None:
        self.requests: list = []

    async def send(self, request):
        self.requests.append(request)
        raise TimeoutError  # no broker here: only the request matters


async def _requested_topics(client, topics):
    conn = _Conn()

    async def get_conn(node_id, *args, **kwargs):
        return conn

    client._get_conn = get_conn
    client.cluster.brokers = lambda: [SimpleNamespace(nodeId=0)]
    await client._metadata_update(client.cluster, topics)
    return conn.requests[-1]._topics


async def _client(named: bool) -> AIOKafkaClient:
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1")
    return named_topics_only(client) if named else client


async def test_a_refresh_with_no_topic_asks_for_none():
    assert await _requested_topics(await _client(named=True), set()) == []
    assert await _requested_topics(await _client(named=False), set()) is None  # aiokafka's


async def test_tracked_topics_and_explicit_everything_are_asked_as_they_are():
    client = await _client(named=True)
    assert await _requested_topics(client, {"a"}) == ["a"]
    assert await _requested_topics(client, None) is None


async def test_the_delivering_producer_uses_the_named_client():
    producer = DeliveringProducer(bootstrap_servers="127.0.0.1:1")
    assert type(producer.client) is NamedTopicsClient
    await producer.stop()
