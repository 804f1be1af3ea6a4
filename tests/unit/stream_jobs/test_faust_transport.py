"""The faust jobs' transport: their sends outlive a timed-out request (a batch that aiokafka
failed after one request timeout was a record faust never sent again: a lost turn;
`runtime.kafka_delivery`)."""

from __future__ import annotations

from faust.transport.drivers import by_url
from faust.types import TP, Message

from runtime.kafka_delivery import DeliveringProducer
from runtime.kafka_metadata import NamedTopicsClient
from runtime.settings import Settings
from stream_jobs import faust_transport
from stream_jobs.faust_app import make_app


def test_the_jobs_send_through_the_delivering_producer():
    assert faust_transport.Producer._producer_type.fget(None) is DeliveringProducer


def test_the_jobs_use_it_with_every_broker_and_the_request_timeout(tmp_path):
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
    assert app.conf.producer_request_timeout == settings.kafka_request_timeout_s


async def test_the_jobs_consumers_read_their_own_topics_metadata_only(tmp_path):
    _, consumer = _consumer(tmp_path)
    thread = consumer._thread
    aiokafka_consumer = thread._create_worker_consumer(thread.transport)
    assert type(aiokafka_consumer._client) is NamedTopicsClient


def _message(offset: int, generation_id: int) -> Message:
    return Message(
        "turns.enriched", 1, offset, 0.0, 0, [], b"k", b"v", None, generation_id=generation_id
    )


def _consumer(tmp_path):
    app = make_app(Settings.from_env({"TURNSTREAM_HOME": str(tmp_path)}), "probe")
    app.topics.acks_enabled_for = lambda topic: True  # as for the jobs' source topics
    return app, app.consumer


def test_a_record_of_an_older_generation_is_never_committed(tmp_path):
    """faust skips a record fetched before a rebalance and acked it: the new generation
    then committed past a record nobody processed (three turns lost in a pause)."""
    app, consumer = _consumer(tmp_path)
    assert isinstance(consumer, faust_transport.Consumer)
    app.consumer_generation_id = 3
    tp = TP("turns.enriched", 1)
    stale, fresh = _message(4, generation_id=2), _message(5, generation_id=3)
    sought = []
    consumer._thread.seek = lambda tp, offset: sought.append((tp, offset))
    consumer.assignment = lambda: {tp}
    consumer._unacked_messages.update({stale, fresh})
    assert consumer.ack(stale) is False
    assert stale.acked and stale not in consumer._unacked_messages  # a rebalance can go on
    assert 4 not in consumer._acked_index[tp]
    assert sought == [(tp, 4)]  # sent back to it: this generation fetches it again
    assert consumer.ack(fresh) is True
    assert list(consumer._acked[tp]) == [5]


def test_a_partition_goes_back_to_its_lowest_stale_record_only():
    """Records come back in order from the lowest: seeking on to a later stale record
    would skip the ones between."""
    tp, other = TP("turns.enriched", 1), TP("turns.completed", 1)
    refetching = faust_transport.Refetching()
    assert refetching.needed(tp, 5, generation=3)
    assert not refetching.needed(tp, 6, generation=3)
    assert refetching.needed(tp, 4, generation=3)
    assert refetching.needed(other, 9, generation=3)
    assert refetching.needed(tp, 6, generation=4)  # a new generation starts over


def test_no_record_is_dropped_as_already_read(tmp_path):
    """faust dropped records below a read offset that its fetch loop could record late,
    after the seek back to the committed offset."""
    _, consumer = _consumer(tmp_path)
    tp = TP("turns.enriched", 1)
    consumer._read_offset[tp] = 4
    assert consumer._read_offset[tp] is None
    consumer._read_offset.pop(tp, None)  # what faust does with it on a revoke still works


async def test_a_partition_never_committed_restarts_from_its_beginning(tmp_path):
    """aiokafka's seek to the committed offsets leaves an uncommitted partition after the
    records the old generation fetched (and dropped): it goes back to its beginning."""
    _, consumer = _consumer(tmp_path)
    thread = consumer._thread
    enriched, committed_tp, changelog = (
        TP("turns.enriched", 7),
        TP("turns.enriched", 1),
        TP("assembly-conversations-changelog", 7),
    )

    class Client:
        sought: list = []

        async def seek_to_committed(self):
            return {enriched: None, committed_tp: 2, changelog: None}

        async def seek_to_beginning(self, *tps):
            self.sought.extend(tps)

    client = Client()
    thread._ensure_consumer = lambda: client
    consumer._is_changelog_tp = lambda tp: tp.topic.endswith("-changelog")
    assert await thread._seek_to_committed_or_beginning() == {
        enriched: None,
        committed_tp: 2,
        changelog: None,
    }
    assert client.sought == [enriched]


class _Queued:
    """A stream event in a queue: what matters here is the record behind it."""

    def __init__(self, message: Message) -> None:
        self.message = message


def test_a_resume_of_the_flow_sends_the_records_it_cleared_back(tmp_path):
    """faust empties every stream queue when a recovery ends: records fetched in the new
    generation were thrown away after the fetch position passed them (an assembly job
    restarted after kill -9 processed 2-5, dropped 6-7, went on from 8: two turns lost)."""
    app, consumer = _consumer(tmp_path)
    app.consumer_generation_id = 2
    tp, other = TP("turns.enriched", 1), TP("turns.completed", 3)
    sought = []
    consumer._thread.seek = lambda tp, offset: sought.append((tp, offset))
    consumer.assignment = lambda: {tp, other}
    queue = app.FlowControlQueue(maxsize=100, clear_on_resume=True)
    dropped = [_message(6, 2), _message(7, 2)]
    for message in dropped:
        queue.force_put_nowait(_Queued(message))
    late = Message("turns.completed", 3, 9, 0.0, 0, [], b"k", b"v", None, generation_id=2)
    queue.force_put_nowait(_Queued(late))
    consumer._unacked_messages.update({*dropped, late})

    app.flow_control.resume()

    assert queue.empty()
    assert sorted(sought) == [(other, 9), (tp, 6)]  # each partition to its lowest record
    assert not consumer._unacked_messages  # a rebalance does not wait for them
    assert not consumer._acked.get(tp)  # and no commit passes them


def test_a_partition_rewinds_to_its_lowest_dropped_record_it_still_owns():
    tp, revoked, changelog = (
        TP("turns.enriched", 1),
        TP("turns.enriched", 2),
        TP("assembly-conversations-changelog", 1),
    )

    def message(tp: TP, offset: int) -> Message:
        return Message(tp.topic, tp.partition, offset, 0.0, 0, [], b"k", b"v", None)

    dropped = [message(tp, 8), message(tp, 6), message(revoked, 3), message(changelog, 4)]
    points = faust_transport.rewind_points(
        dropped,
        assigned={tp, changelog},
        committed={},
        skip=lambda tp: tp.topic.endswith("-changelog"),
    )
    assert points == {tp: 6}
    # committed past already (processed in an earlier generation): nothing to read again
    committed = faust_transport.rewind_points(
        dropped, assigned={tp}, committed={tp: 7}, skip=lambda tp: False
    )
    assert committed == {tp: 8}
