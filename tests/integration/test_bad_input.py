"""Bad input at the edge and on the topics: precise errors, and everyone else keeps working."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from harness.factories import new_conversation_id as conv
from harness.kafka import find_record
from runtime.settings import Settings
from schemas.codec import encode
from schemas.events import FinishReason, TurnCompleted, TurnSubmitted
from schemas.ids import now_ms
from schemas.turn_log import decode_relay_message
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.messages import ErrorEvent, ResponseDone, SessionReady
from ws_edge.server import EdgeServer

pytestmark = pytest.mark.integration


async def test_malformed_frames_get_errors_and_the_connection_keeps_working(fake_pipeline):
    settings = fake_pipeline.settings
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token()) as client:
        cases = [
            ("{oops", "malformed_json"),
            ('{"type": "turn.teleport"}', "unknown_type"),
            (
                '{"type": "turn.create", "conversation_id": "c", "text": "x", "colour": 1}',
                "invalid_message",
            ),
            (
                json.dumps(  # only messages that may carry media can be large
                    {"type": "ping", "id": "p", "pad": "x" * (settings.max_message_bytes + 1)}
                ),
                "message_too_large",
            ),
            (
                json.dumps(
                    {
                        "type": "turn.create",
                        "conversation_id": "c",
                        "text": "y" * (settings.max_turn_chars + 1),
                    }
                ),
                "invalid_message",
            ),
            ('{"type": "turn.cancel", "turn_id": "not-mine"}', "unknown_turn"),
        ]
        for raw, code in cases:
            await client.send_raw(raw)
            event = await client.next_event()
            assert isinstance(event, ErrorEvent) and event.code == code, (raw[:40], event)
        done = await client.ask(conv(), "still fine?")
    assert done.finish_reason == FinishReason.STOP


async def test_oversized_frame_closes_only_that_connection(fake_pipeline):
    settings = fake_pipeline.settings
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token("bob")) as bystander:
        turn_id = await bystander.start_turn(conv(), "long answer " * 20)
        async with connect(fake_pipeline.url, max_size=None) as rude:
            await rude.send("x" * (settings.max_frame_bytes + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(rude.recv(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        events = [e async for e in bystander.events(turn_id)]
    assert isinstance(events[-1], ResponseDone) and events[-1].finish_reason == FinishReason.STOP


async def test_forged_token_then_a_good_one(fake_pipeline):
    async with connect(fake_pipeline.url + "?token=forged.token.value") as ws:
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["type"] == "error" and error["code"] == "token_invalid"
        await ws.send(
            json.dumps({"type": "session.authenticate", "token": fake_pipeline.token("carol")})
        )
        ready = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert ready["type"] == "session.ready" and ready["user_id"] == "carol"


async def test_missing_token_is_refused_until_authenticated(fake_pipeline):
    async with EdgeClient.connect(fake_pipeline.url) as client:
        with pytest.raises(TurnRejected) as rejected:
            await client.start_turn(conv(), "hello?")
        assert rejected.value.error.code == "unauthenticated"


async def test_bearer_header_authenticates(fake_pipeline):
    headers = {"Authorization": f"Bearer {fake_pipeline.token('dave')}"}
    async with connect(fake_pipeline.url, additional_headers=headers) as ws:
        ready = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert ready["type"] == "session.ready" and ready["user_id"] == "dave"


async def test_someone_elses_conversation_is_forbidden(fake_pipeline):
    conversation = conv()
    async with (
        EdgeClient.connect(fake_pipeline.url, fake_pipeline.token("alice")) as alice,
        EdgeClient.connect(fake_pipeline.url, fake_pipeline.token("mallory")) as mallory,
    ):
        await alice.ask(conversation, "my secret plan")
        with pytest.raises(TurnRejected) as rejected:
            await mallory.start_turn(conversation, "what did alice say?")
        assert rejected.value.error.code == "forbidden_conversation"
        again = await alice.ask(conversation, "and then?")
    assert again.text.endswith("(turn 2)")


async def test_tenants_never_share_a_conversation(fake_pipeline):
    """The same conversation id in another tenant is another conversation: no history
    crosses over, and nobody can block another tenant's ids."""
    conversation = conv()
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token("u1", "t1")) as a:
        await a.ask(conversation, "secret of tenant one")
        await a.ask(conversation, "more")
    async with EdgeClient.connect(fake_pipeline.url, fake_pipeline.token("u1", "t2")) as b:
        other = await b.ask(conversation, "what was said here?")
    assert other.text.endswith("(turn 1)")  # t1's two turns are not in t2's context


async def test_a_turn_sent_while_the_edge_still_connects_waits_for_kafka(fake_settings: Settings):
    """The first turn of an edge that has just started (its producer is still connecting in
    the background) is published, not refused with broker_unavailable."""
    from producers.turn_publisher import TurnPublisher

    topic = f"{fake_settings.namespace}.turns.submitted"
    publisher = TurnPublisher(
        fake_settings.kafka_bootstrap, topic, client_id="early-edge", timeout_s=10.0
    )
    await publisher.start()
    try:
        assert not await publisher.wait_connected(0)  # not connected yet
        turn = TurnSubmitted(
            turn_id=f"t-{uuid.uuid4().hex[:8]}",
            conversation_id=conv(),
            tenant_id="acme",
            user_id="early",
            edge_id="e",
            text="first!",
            submitted_at_ms=now_ms(),
        )
        await publisher.publish(turn)
    finally:
        await publisher.stop()
    record = await find_record(
        fake_settings.kafka_bootstrap, topic, lambda r: turn.turn_id.encode() in r.value
    )
    assert record.key == turn.conversation_id.encode()


async def test_unreachable_broker_gives_a_retryable_error(fake_settings: Settings):
    settings = Settings.from_env(
        namespace=fake_settings.namespace,
        edge_port=0,
        kafka_bootstrap="127.0.0.1:1",
        publish_timeout_s=1.0,
    )
    edge = EdgeServer(settings)
    await edge.start()
    try:
        from ws_edge.auth import mint_token

        token = mint_token(settings.auth_secret, "erin")
        async with EdgeClient.connect(f"ws://127.0.0.1:{edge.port}/", token) as client:
            assert isinstance(client.ready, SessionReady)
            with pytest.raises(TurnRejected) as rejected:
                await client.start_turn(conv(), "is anyone there?")
            error = rejected.value.error
            assert error.code == "broker_unavailable" and error.retryable and error.turn_id
            with pytest.raises(TurnRejected):  # the session survives and answers again
                await client.start_turn(conv(), "and now?")
    finally:
        await edge.stop()


async def test_undecodable_and_duplicate_messages_on_the_topic(fake_pipeline):
    """Garbage is dead-lettered with its reason; a duplicate turn is answered once."""
    settings = fake_pipeline.settings
    ns = settings.namespace
    names = fake_pipeline.worker.service.names
    edge_id = f"probe-{uuid.uuid4().hex[:6]}"
    pubsub = fake_pipeline.worker.service.redis.pubsub()
    await pubsub.subscribe(names.edge_channel(edge_id))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    marker = uuid.uuid4().hex.encode()
    turn = TurnSubmitted(
        turn_id=uuid.uuid4().hex,
        conversation_id=conv(),
        tenant_id="acme",
        user_id="zed",
        edge_id=edge_id,
        text="twice",
        submitted_at_ms=now_ms(),
    )
    try:
        await producer.send_and_wait(f"{ns}.turns.submitted", b"\x00garbage" + marker, key=b"k")
        for _ in range(2):
            await producer.send_and_wait(
                f"{ns}.turns.submitted", encode(turn), key=turn.conversation_id.encode()
            )
        completions = 0
        async with asyncio.timeout(30):
            while completions < 2:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                if message:
                    frames = decode_relay_message(message["data"])
                    completions += sum(isinstance(e, TurnCompleted) for e, _ in frames)
    finally:
        await producer.stop()
        await pubsub.aclose()
    assert fake_pipeline.engine.requests.count(turn.turn_id) == 1  # both answered, generated once

    found = await find_record(
        settings.kafka_bootstrap, f"{ns}.deadletters", lambda r: marker in r.value
    )
    headers = dict(found.headers)
    assert headers["error_code"] == b"malformed_event"
    assert headers["source_topic"] == f"{ns}.turns.submitted".encode()
