"""Kafka clients that re-read the metadata of the topics they use, never the whole cluster's.

aiokafka re-reads a client's metadata every `metadata_max_age_ms` (3 s here:
TURNSTREAM_KAFKA_METADATA_MAX_AGE_S) for the topics the client tracks, and for *every topic
of the cluster* while it tracks none: a producer that has not sent yet, a consumer before its
subscription. Decoding a cluster's metadata is pure Python, proportional to its partitions
(48 ms of CPU for 5,575 partitions on the development broker), so an idle producer paid
that every 3 s: most of what the idle stack's roles burned (docs/cost.md, 2026-12-06), and
more on a shared production cluster with many topics.

A client made here asks for no topic at all while it tracks none (the brokers and the
controller still come back); a producer adds its topic on its first send, a consumer its
subscription, as aiokafka does anyway. An explicit request for everything
(`fetch_all_metadata`, `list_topics`) still gets everything.
"""

from __future__ import annotations

from typing import Any

from aiokafka.client import AIOKafkaClient


class _NoTopics(frozenset):
    """An empty topic list that aiokafka's request builder keeps as one: it sends "all
    topics" (`None`) for any falsy topic collection."""

    def __bool__(self) -> bool:
        return True


NO_TOPICS: frozenset[str] = _NoTopics()


class NamedTopicsClient(AIOKafkaClient):
    """An `AIOKafkaClient` whose periodic refresh with no tracked topic reads none."""

    async def _metadata_update(self, cluster_metadata: Any, topics: Any) -> bool:
        if topics is not None and not topics:
            topics = NO_TOPICS
        return await super()._metadata_update(cluster_metadata, topics)


def named_topics_only(client: AIOKafkaClient) -> AIOKafkaClient:
    """Make an aiokafka client (a producer's `.client`, a consumer's `._client`) a
    `NamedTopicsClient`; aiokafka builds its clients itself, so the class is swapped on the
    instance (it adds no state)."""
    client.__class__ = NamedTopicsClient
    return client
