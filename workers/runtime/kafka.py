"""Kafka clients configured the same way in every worker (latency-minded defaults).

The producer continues the trace of whatever the worker is handling: a record sent while a
turn's span is current carries its context in its headers, under a `send <topic>` span
(`runtime.tracing`); records sent outside any trace (metrics) are sent as they are.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from runtime.kafka_delivery import DeliveringProducer
from runtime.kafka_metadata import named_topics_only
from runtime.settings import Settings
from runtime.tracing.propagation import TRACEPARENT, has_context
from runtime.tracing.spans import producing


class TracedProducer(DeliveringProducer):
    """An `AIOKafkaProducer` whose records carry the current trace context (and whose
    batches outlive a timed-out request: `runtime.kafka_delivery`)."""

    # aiokafka's own signature (its send_and_wait passes every argument positionally)
    async def send(  # noqa: PLR0917
        self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None
    ):
        if not has_context() or _traced(headers):
            return await super().send(topic, value, key, partition, timestamp_ms, headers)
        with producing(topic, headers) as traced:
            return await super().send(topic, value, key, partition, timestamp_ms, traced)

    async def send_and_wait(  # noqa: PLR0917
        self, topic, value=None, key=None, partition=None, timestamp_ms=None, headers=None
    ):
        """The span lasts until the broker acknowledged the record (its `send` inside sees
        the context already in the headers and adds no second span)."""
        if not has_context() or _traced(headers):
            return await super().send_and_wait(topic, value, key, partition, timestamp_ms, headers)
        with producing(topic, headers) as traced:
            return await super().send_and_wait(topic, value, key, partition, timestamp_ms, traced)


def _traced(headers) -> bool:
    return bool(headers) and any(k == TRACEPARENT for k, _ in headers)


def make_producer(settings: Settings, client_id: str) -> AIOKafkaProducer:
    """acks=all, no linger: an event is durable before anyone is told it was sent.

    Kafka's idempotent producer only when asked (TURNSTREAM_KAFKA_IDEMPOTENT, for a
    replicated cluster, where a send retried across a leader's failover would otherwise
    write its record twice): duplicates are harmless anyway (events carry turn ids and
    consumers dedupe on them), and aiokafka's idempotent mode serialises in-flight
    requests, which cost 8 ms p50 / 25 ms p99 per send under a 128-turn burst here (vs
    2 / 5 ms). Order per conversation is kept by the senders (one send in flight each).
    """
    return TracedProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        client_id=client_id,
        acks="all",
        enable_idempotence=settings.kafka_idempotent,
        linger_ms=0,
        request_timeout_ms=int(settings.kafka_request_timeout_s * 1000),
        metadata_max_age_ms=int(settings.kafka_metadata_max_age_s * 1000),
    )


def make_consumer(
    settings: Settings,
    group_id: str,
    client_id: str,
    *,
    fetch_min_bytes: int = 1,
) -> AIOKafkaConsumer:
    """Manual commits (see `ConsumerLoop`), short fetch waits on latency paths
    (TURNSTREAM_FETCH_MAX_WAIT_MS; a reader off the user's path may ask for fuller fetches,
    `fetch_min_bytes`, within the same wait).

    A member silent for the session timeout (a killed worker) loses its partitions to the
    others, and a broker silent as long (paused, cut off) is given up: its requests time
    out. Metadata is re-read every TURNSTREAM_KAFKA_METADATA_MAX_AGE_S, so partitions whose
    leader moved (the controller fences a silent broker within seconds) are fetched from
    the new leader while a request to the old one still hangs (aiokafka's defaults, 40 s
    and 5 minutes, held turns through a whole 30 s pause of a cluster's broker).
    """
    session_ms = int(settings.kafka_session_timeout_s * 1000)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=group_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        fetch_min_bytes=fetch_min_bytes,
        max_poll_interval_ms=600_000,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(session_ms // 3, 100),
        request_timeout_ms=session_ms,
        metadata_max_age_ms=int(settings.kafka_metadata_max_age_s * 1000),
    )
    named_topics_only(consumer._client)  # its subscription's topics only
    return consumer
