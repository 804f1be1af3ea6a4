"""Resumable streams on the real pipeline: a client drops mid-answer and resumes on another
edge node with no gap and no duplicate; a second device joins an answer in flight; an
answer whose history expired is given whole; nobody resumes another user's turn; a turn
refused as not acknowledged by Kafka that did reach it is retried and caught up whole."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import completions_of
from harness.polling import eventually
from harness.stack import another_edge
from producers.turn_publisher import PublishFailed
from runtime.redis import redis_client
from schemas.channels import RedisNames
from schemas.turn_log import LogPosition
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ResponseDelta, ResponseDone, ResponseStarted
from ws_edge.server import EdgeServer

if TYPE_CHECKING:
    from schemas.events import TurnSubmitted

pytestmark = pytest.mark.integration

# the fake engine echoes the question word by word at 5 ms a word: ~5 s of answer
LONG_QUESTION = " ".join(f"{i % 10}z" for i in range(1000))  # 3000 chars: under the limit


def url_of(edge: EdgeServer) -> str:
    return f"ws://127.0.0.1:{edge.port}/"


def check_contiguous(positions: list[LogPosition]) -> None:
    """Within one epoch, each logged frame's offset follows the one before it (a joined
    delta may cover several offsets, so only strictly increasing is required)."""
    assert positions == sorted(set(positions)), positions  # no duplicate, in order


async def test_a_client_moves_to_another_edge_mid_answer_and_misses_nothing(fake_pipeline):
    token = fake_pipeline.token("mover", "acme")
    conversation = conv()
    seen: list[str] = []
    positions: list[LogPosition] = []
    async with EdgeClient.connect(fake_pipeline.url, token) as first:
        turn_id = await first.start_turn(conversation, LONG_QUESTION, max_tokens=1000)
        async for event in first.events(turn_id):
            if isinstance(event, ResponseDelta):
                seen.append(event.text)
                positions.append(LogPosition(event.epoch, event.offset))
                if len(seen) == 5:
                    break
        where = first.positions[turn_id]
    # the connection is gone; generation goes on; the client comes back elsewhere
    async with (
        another_edge(fake_pipeline) as edge_b,
        EdgeClient.connect(url_of(edge_b), token) as second,
    ):
        resumed = await second.resume(turn_id, after=where)
        assert resumed.status == "resumed" and resumed.conversation_id == conversation
        assert (resumed.epoch, resumed.offset) == tuple(where)
        assert not resumed.finished  # mid-answer: the rest is partly log, partly live
        async for event in second.events(turn_id):
            if isinstance(event, ResponseDelta):
                seen.append(event.text)
                positions.append(LogPosition(event.epoch, event.offset))
            elif isinstance(event, ResponseDone):
                done = event
    assert done.error is None
    assert "".join(seen) == done.text  # no gap, no duplicate
    check_contiguous(positions)
    assert fake_pipeline.engine.requests.count(turn_id) == 1  # generated once, not again


async def test_a_second_device_joins_the_answer_in_flight(fake_pipeline):
    token = fake_pipeline.token("twodevices", "acme")
    conversation = conv()
    async with (
        another_edge(fake_pipeline) as edge_b,
        EdgeClient.connect(fake_pipeline.url, token) as phone,
        EdgeClient.connect(url_of(edge_b), token) as laptop,
    ):
        turn_id = await phone.start_turn(conversation, LONG_QUESTION, max_tokens=1000)
        phone_text: list[str] = []
        async for event in phone.events(turn_id):
            if isinstance(event, ResponseDelta):
                phone_text.append(event.text)
                break
        joined = await laptop.resume(conversation_id=conversation)  # from the start
        assert joined.turn_id == turn_id and joined.status == "resumed"
        laptop_events = [e async for e in laptop.events(turn_id)]
        async for event in phone.events(turn_id):
            if isinstance(event, ResponseDelta):
                phone_text.append(event.text)
    laptop_done = laptop_events[-1]
    assert isinstance(laptop_done, ResponseDone)
    assert any(isinstance(e, ResponseStarted) for e in laptop_events)  # from the start
    laptop_text = "".join(e.text for e in laptop_events if isinstance(e, ResponseDelta))
    assert laptop_text == laptop_done.text == "".join(phone_text)


async def test_an_answer_whose_history_expired_comes_whole(fake_pipeline):
    token = fake_pipeline.token("late", "acme")
    async with EdgeClient.connect(fake_pipeline.url, token) as client:
        turn_id = await client.start_turn(conv(), "a short question")
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta):
                break
        where = client.positions[turn_id]
    names = fake_pipeline.edge.names
    redis = fake_pipeline.edge.redis

    async def finished_and_logged() -> bool:  # the answer ends while the client is away
        return (await redis.exists(names.done_key(turn_id))) and any(
            b'"turn.completed"' in fields[b"e"]
            for _, fields in await redis.xrange(names.turn_log_key(turn_id))
        )

    await eventually(finished_and_logged)
    await redis.delete(names.turn_log_key(turn_id))  # what TURNSTREAM_RESUME_AFTER_DONE_S does
    async with EdgeClient.connect(fake_pipeline.url, token) as client:
        resumed = await client.resume(turn_id, after=where)
        assert resumed.status == "expired" and resumed.finished
        events = [e async for e in client.events(turn_id)]
    assert isinstance(events[-1], ResponseDone)
    assert events[-1].text.startswith("You said: a short question")


async def test_a_finished_answer_is_replayed_from_its_log(fake_pipeline):
    token = fake_pipeline.token("replayer", "acme")
    async with EdgeClient.connect(fake_pipeline.url, token) as client:
        done = await client.ask(conv(), "replay me")
        turn_id = done.turn_id
    async with EdgeClient.connect(fake_pipeline.url, token) as client:
        resumed = await client.resume(turn_id)
        assert resumed.status == "resumed" and resumed.finished
        events = [e async for e in client.events(turn_id)]
    text = "".join(e.text for e in events if isinstance(e, ResponseDelta))
    assert text == events[-1].text == done.text


async def test_nobody_resumes_another_users_turn(fake_pipeline):
    owner = fake_pipeline.token("owner", "acme")
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, owner) as client:
        done = await client.ask(conversation, "private words")
    for user, tenant in [("intruder", "acme"), ("owner", "other-tenant")]:
        async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token(user, tenant)) as spy:
            with pytest.raises(TurnRejected) as by_id:
                await spy.resume(done.turn_id)
            assert by_id.value.error.code == "unknown_turn"
            with pytest.raises(TurnRejected) as by_conversation:
                await spy.resume(conversation_id=conversation)
            assert by_conversation.value.error.code == "unknown_turn"
            # forged positions change nothing
            with pytest.raises(TurnRejected):
                await spy.resume(done.turn_id, after=LogPosition(1, 10**9))
            # and the session still serves its own user
            mine = await spy.ask(conv(), "still here")
            assert mine.error is None


class LostAck:
    """A publisher whose first send of each turn reaches Kafka but whose acknowledgement
    is lost (a broker restarting as it answers): the edge refuses a turn that is in Kafka
    and will be answered."""

    def __init__(self, publisher) -> None:
        self._publisher = publisher
        self.lost: set[str] = set()

    async def publish(self, turn: TurnSubmitted, topic: str | None = None) -> None:
        await self._publisher.publish(turn, topic)
        if turn.turn_id not in self.lost:
            self.lost.add(turn.turn_id)
            raise PublishFailed("Kafka did not acknowledge the turn: lost in a restart")

    def __getattr__(self, name: str):
        return getattr(self._publisher, name)


async def test_a_turn_refused_although_it_reached_kafka_is_retried_and_caught_up_whole(
    fake_pipeline,
):
    """The client is told `broker_unavailable` for a turn that is in Kafka and answering;
    its retry with the same client_turn_id is accepted as that turn, catches up from its
    log (the first try's frames were streamed to nobody) and sees the whole answer once."""
    token = fake_pipeline.token("unlucky", "acme")
    conversation = conv()
    async with another_edge(fake_pipeline, "lost-ack") as edge:
        flaky = LostAck(edge.publisher)
        edge.publisher = flaky  # type: ignore[assignment]
        async with EdgeClient.connect(url_of(edge), token) as client:
            with pytest.raises(TurnRejected) as refused:
                await client.start_turn(conversation, LONG_QUESTION, max_tokens=1000)
            assert refused.value.error.code == "broker_unavailable"
            [turn_id] = flaky.lost
            # the first try is answering meanwhile, its frames going to nobody
            log_key = RedisNames.for_namespace(edge.settings.namespace).turn_log_key(turn_id)
            redis = redis_client(edge.settings.redis_url)
            try:
                await eventually(lambda: _at_least(redis.xlen(log_key), 10))
            finally:
                await redis.aclose()
            retried = await client.start_turn(
                conversation,
                LONG_QUESTION,
                max_tokens=1000,
                client_turn_id=refused.value.client_turn_id,
            )
            assert retried == turn_id
            seen: list[str] = []
            positions: list[LogPosition] = []
            started = 0
            async for event in client.events(turn_id):
                if isinstance(event, ResponseStarted):
                    started += 1
                elif isinstance(event, ResponseDelta):
                    seen.append(event.text)
                    positions.append(LogPosition(event.epoch, event.offset))
                elif isinstance(event, ResponseDone):
                    done = event
    assert done.error is None and done.text.startswith("You said: 0z 1z")
    assert started == 1
    assert "".join(seen) == done.text  # from its start: no gap, no duplicate
    check_contiguous(positions)
    assert fake_pipeline.engine.requests.count(turn_id) == 1  # generated once
    assert await completions_of(fake_pipeline.settings, turn_id) == 1  # recorded once


async def _at_least(count, n: int) -> bool:
    return await count >= n
