"""Producers whose batches outlive a timed-out request: a batch that aiokafka failed after
one request timeout was a record its caller might never send again (faust never does: a
lost turn under a paused broker)."""

from __future__ import annotations

from runtime.kafka_delivery import DELIVERY_TIMEOUT_S, DeliveringProducer
from runtime.settings import Settings
from workers.runtime.kafka import make_producer


async def test_a_batch_lives_past_a_timed_out_request():
    producer = DeliveringProducer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=5_000)
    assert producer._message_accumulator._batch_ttl == DELIVERY_TIMEOUT_S > 5


async def test_the_workers_producers_deliver_and_give_a_silent_broker_up_soon(tmp_path):
    settings = Settings.from_env(
        {"TURNSTREAM_HOME": str(tmp_path), "TURNSTREAM_KAFKA_REQUEST_TIMEOUT_S": "3"}
    )
    producer = make_producer(settings, "probe")
    assert isinstance(producer, DeliveringProducer)
    assert producer._message_accumulator._batch_ttl == DELIVERY_TIMEOUT_S
    assert producer._request_timeout_ms == 3_000
