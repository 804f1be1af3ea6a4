"""faust's Kafka transport with one change: a send whose request timed out is sent again.

aiokafka gives a batch one request timeout to be delivered, from its creation: a request
that times out (a broker that stopped answering: paused, cut off) finds its batch already
past that age, and the batch fails for good. faust does not send a failed record again, so
the record was lost: a changelog entry, a `turns.assembled` of an accepted turn (a paused
broker lost 2 of 126 turns this way with a 10 s timeout). faust's default timeout (20
minutes) only hides it: the send then waits for the silent broker, however long it stays
silent, and the turns behind it with it (31 s under a 30 s pause).

Here a batch lives `DELIVERY_TIMEOUT_S` (Kafka's Java client's `delivery.timeout.ms`, two
minutes), each request `producer_request_timeout` (the session timeout): a request to a
silent broker times out, its batch is retried, on the partition's new leader once the
metadata (re-read every few seconds) names it.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as driver

SCHEME = "turnstream-kafka"
DELIVERY_TIMEOUT_S = 120.0


class DeliveringProducer(AIOKafkaProducer):
    """An aiokafka producer whose batches outlive a timed-out request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # aiokafka has no setting for it: the accumulator's batch lifetime is private
        self._message_accumulator._batch_ttl = DELIVERY_TIMEOUT_S


class Producer(driver.Producer):
    @property
    def _producer_type(self) -> type[AIOKafkaProducer]:
        return DeliveringProducer


class Transport(driver.Transport):
    Producer = Producer


def register() -> str:
    """Make `turnstream-kafka://` name this transport (idempotent); the scheme."""
    TRANSPORTS[SCHEME] = f"{__name__}:Transport"
    return SCHEME
