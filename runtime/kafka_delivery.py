"""An aiokafka producer whose batches outlive a timed-out request: the send is tried again.

aiokafka gives a batch one request timeout to be delivered, counted from its creation
(idempotent producers excepted): a request that times out (a broker that stopped answering:
paused, cut off) finds its batch already past that age, and the batch fails for good. A
caller that does not send again loses the record (faust never does: a changelog entry, a
`turn.assembled` of an accepted turn; a paused broker lost 2 of 126 turns this way).
A long request timeout only hides it: the send then waits for the silent broker, and the
turns behind it with it.

Here a batch lives `DELIVERY_TIMEOUT_S` (Kafka's Java client's `delivery.timeout.ms`, two
minutes) and each request `TURNSTREAM_KAFKA_REQUEST_TIMEOUT_S`: a request to a silent broker
times out and its batch is sent again, to the partition's new leader once the metadata
(re-read every few seconds) names it.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from runtime.kafka_metadata import named_topics_only

DELIVERY_TIMEOUT_S = 120.0


class DeliveringProducer(AIOKafkaProducer):
    """An aiokafka producer whose batches live `DELIVERY_TIMEOUT_S`, whatever the request
    timeout (and whose metadata covers its own topics only: `runtime.kafka_metadata`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        named_topics_only(self.client)
        # aiokafka has no setting for it: the accumulator's batch lifetime is private
        self._message_accumulator._batch_ttl = DELIVERY_TIMEOUT_S
