"""The faust jobs' transport: their sends outlive a timed-out request (a batch that aiokafka
failed after one request timeout was a record faust never sent again: a lost turn)."""

from __future__ import annotations

from faust.transport.drivers import by_url

from runtime.settings import Settings
from stream_jobs import faust_transport
from stream_jobs.faust_app import make_app


async def test_a_batch_lives_past_a_timed_out_request():
    producer = faust_transport.DeliveringProducer(
        bootstrap_servers="127.0.0.1:1", request_timeout_ms=10_000
    )
    accumulator = producer._message_accumulator
    assert accumulator._batch_ttl == faust_transport.DELIVERY_TIMEOUT_S > 10


def test_the_jobs_use_it_with_every_broker_and_a_request_timeout_of_the_session(tmp_path):
    settings = Settings.from_env(
        {
            "TURNSTREAM_HOME": str(tmp_path),
            "TURNSTREAM_KAFKA_BOOTSTRAP": "127.0.0.1:9092,127.0.0.1:9094",
        }
    )
    app = make_app(settings, "probe")
    brokers = [str(url) for url in app.conf.broker]
    assert brokers == ["turnstream-kafka://127.0.0.1:9092", "turnstream-kafka://127.0.0.1:9094"]
    assert by_url(brokers[0]) is faust_transport.Transport
    assert faust_transport.Transport.Producer is faust_transport.Producer
    assert app.conf.producer_request_timeout == settings.kafka_session_timeout_s
