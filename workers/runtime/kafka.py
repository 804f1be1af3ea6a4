"""Kafka clients configured the same way in every worker (latency-minded defaults)."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


def make_producer(bootstrap: str, client_id: str) -> AIOKafkaProducer:
    """acks=all, no linger: an event is durable before anyone is told it was sent.

    Not Kafka's idempotent producer: duplicates are already harmless (events carry turn ids
    and consumers dedupe on them), and aiokafka's idempotent mode serialises in-flight
    requests, which cost 8 ms p50 / 25 ms p99 per send under a 128-turn burst here (vs
    2 / 5 ms). Order per conversation is kept by the senders (one send in flight each).
    """
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        acks="all",
        enable_idempotence=False,
        linger_ms=0,
        request_timeout_ms=10000,
    )


def make_consumer(
    bootstrap: str, group_id: str, client_id: str, fetch_max_wait_ms: int
) -> AIOKafkaConsumer:
    """Manual commits (see `ConsumerLoop`), short fetch waits on latency paths."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_max_wait_ms,
        max_poll_interval_ms=600_000,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
    )
