"""A worker dies mid-answer: Kafka hands its turn to another worker, the client is told to
start over, and the turn still ends with one complete answer. Rebalances that are not
crashes finish in-flight turns first, so nothing is answered twice.

The first test is the crash as production has it: two worker processes behind the default
router, and the one answering is killed with SIGKILL (no drain, no goodbye to the group)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from aiokafka.partitioner import DefaultPartitioner

from harness.kafka import completions_of
from harness.stack import Pipeline, running_assembly
from runtime.kafka_topics import ensure_topics
from runtime.processes import Child
from runtime.redis import redis_client
from runtime.settings import Settings, settings_env
from runtime.state_board import read_states
from schemas.channels import RedisNames
from schemas.topics import POOL_PARTITIONS
from workers.inference.app import RunningWorker, run_worker
from workers.inference.engines.fake_engine import FakeEngine
from workers.preprocess.app import run_preprocessor
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone, ResponseRestarted, ResponseStarted
from ws_edge.server import EdgeServer

pytestmark = pytest.mark.integration


async def answering_worker(settings: Settings, children: dict[str, Child]) -> str:
    """The worker holding a turn now, read from the pool's state board (its `in_flight`)."""
    redis = redis_client(settings.redis_url)
    key = RedisNames.for_namespace(settings.namespace).worker_states_key(settings.pool)
    try:
        async with asyncio.timeout(30):
            while True:
                busy = [s.worker_id for s in await read_states(redis, key) if s.in_flight]
                if len(busy) == 1 and busy[0] in children:
                    return busy[0]
                await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


@pytest.mark.timeout(180)
async def test_a_turn_survives_its_worker_killed_with_sigkill(
    services, session_namespace, tmp_path
):
    settings = Settings.from_env(namespace=f"{session_namespace}-kill9", edge_port=0)
    assert settings.routing_strategy not in ("key_hash", "")  # the default router decides
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    env = {
        **os.environ,
        **settings_env(settings),
        "PYTHONUNBUFFERED": "1",
        "TURNSTREAM_ENGINE": "fake",
        "TURNSTREAM_FAKE_TOKEN_INTERVAL_MS": "40",
    }
    children = {
        name: Child(
            name,
            "workers.inference",
            tmp_path / f"{name}.log",
            {**env, "TURNSTREAM_WORKER_ID": name},
        )
        for name in ("worker-a", "worker-b")
    }
    try:
        for child in children.values():
            child.wait_ready(timeout_s=120)
        async with running_assembly(settings), run_preprocessor(settings):
            edge = EdgeServer(settings)
            await edge.start()
            try:
                token = mint_token(settings.auth_secret, "alice", "acme")
                url = f"ws://127.0.0.1:{edge.port}/"
                async with EdgeClient.connect(url, token) as client:
                    turn_id = await client.start_turn("c-kill9", "tell me a long story " * 8)
                    events, killed = [], ""
                    async for event in client.events(turn_id):
                        events.append(event)
                        if isinstance(event, ResponseDelta) and event.seq >= 2 and not killed:
                            killed = await answering_worker(settings, children)
                            os.kill(children[killed].process.pid, signal.SIGKILL)
            finally:
                await edge.stop()
    finally:
        for child in children.values():
            child.stop()
    assert killed and children[killed].process.returncode == -signal.SIGKILL
    kinds = [type(e) for e in events]
    assert ResponseRestarted in kinds  # the client was told to start over
    restart = kinds.index(ResponseRestarted)
    assert kinds[restart + 1] is ResponseStarted
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.finish_reason == "stop"
    after = "".join(e.text for e in events[restart:] if isinstance(e, ResponseDelta))
    assert after == done.text and done.text.startswith("You said: tell me a long story")
    assert await completions_of(settings, turn_id) == 1  # answered once, by the survivor


def conversation_owned_by(worker: RunningWorker) -> str:
    """A conversation id whose partition this worker holds right now."""
    owned = {tp.partition for tp in worker.loop.consumer.assignment()}
    partitions = list(range(POOL_PARTITIONS))
    while True:
        candidate = f"c-{uuid.uuid4().hex[:10]}"
        if DefaultPartitioner()(candidate.encode(), partitions, partitions) in owned:
            return candidate


def _settled(workers: tuple[RunningWorker, ...]) -> bool:
    sizes = [len(w.loop.consumer.assignment()) for w in workers]
    return all(sizes) and sum(sizes) == POOL_PARTITIONS


async def wait_for_assignment(*workers: RunningWorker) -> None:
    """Poll the consumers' assignments (group state lives in the broker: no event to await)."""
    async with asyncio.timeout(60):
        while not _settled(workers):  # noqa: ASYNC110
            await asyncio.sleep(0.1)


async def test_a_turn_survives_its_worker_dying_mid_answer(services, session_namespace):
    settings = Settings.from_env(
        namespace=f"{session_namespace}-failover", edge_port=0, routing_strategy="key_hash"
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    survivor_engine = FakeEngine(token_interval_s=0.005)
    async with (
        running_assembly(settings),
        run_worker(settings, survivor_engine) as survivor,
        run_preprocessor(settings),
    ):
        victim_cm = run_worker(settings, FakeEngine(token_interval_s=0.05))
        victim = await victim_cm.__aenter__()
        victim_alive = True
        edge = EdgeServer(settings)
        await edge.start()
        try:
            await wait_for_assignment(survivor, victim)
            pipe = Pipeline(settings, edge, victim, victim.service.engine)
            token = mint_token(settings.auth_secret, "alice", "acme")
            conversation = conversation_owned_by(victim)
            async with EdgeClient.connect(pipe.url, token) as client:
                turn_id = await client.start_turn(conversation, "tell me a long story " * 5)
                events = []
                async for event in client.events(turn_id):
                    events.append(event)
                    if isinstance(event, ResponseDelta) and event.seq >= 2 and victim_alive:
                        victim.drain_s = 0  # die now: nothing unfinished is committed
                        await victim_cm.__aexit__(None, None, None)
                        victim_alive = False
        finally:
            if victim_alive:
                await victim_cm.__aexit__(None, None, None)
            await edge.stop()
    kinds = [type(e) for e in events]
    assert ResponseRestarted in kinds
    restart = kinds.index(ResponseRestarted)
    assert kinds[restart + 1] is ResponseStarted
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.finish_reason == "stop"
    after = "".join(e.text for e in events[restart:] if isinstance(e, ResponseDelta))
    assert after == done.text and done.text.startswith("You said: tell me a long story")
    assert turn_id not in survivor_engine.aborted
    assert await completions_of(settings, turn_id) == 1  # answered once, by the survivor


def conversations_on_every_partition() -> list[str]:
    partitions = list(range(POOL_PARTITIONS))
    found: dict[int, str] = {}
    while len(found) < len(partitions):
        candidate = f"c-{uuid.uuid4().hex[:10]}"
        found.setdefault(
            DefaultPartitioner()(candidate.encode(), partitions, partitions), candidate
        )
    return list(found.values())


async def test_a_rebalance_lets_in_flight_turns_finish_instead_of_answering_twice(
    services, session_namespace
):
    settings = Settings.from_env(
        namespace=f"{session_namespace}-rebalance",
        edge_port=0,
        routing_strategy="key_hash",
        max_turns_in_flight_per_session=POOL_PARTITIONS,
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    newcomer_engine = FakeEngine(token_interval_s=0.005)
    conversations = conversations_on_every_partition()  # whichever move, one has a turn
    async with (
        running_assembly(settings),
        run_worker(settings, FakeEngine(token_interval_s=0.03)) as first,
        run_preprocessor(settings),
    ):
        edge = EdgeServer(settings)
        await edge.start()
        try:
            await wait_for_assignment(first)
            token = mint_token(settings.auth_secret, "bob", "acme")
            async with EdgeClient.connect(f"ws://127.0.0.1:{edge.port}/", token) as client:
                # ~160 tokens at 30 ms each: the group rebalances while they stream
                turn_ids = [
                    await client.start_turn(c, "a fairly long question " * 40)
                    for c in conversations
                ]
                first_delta = await anext(
                    e async for e in client.events(turn_ids[0]) if isinstance(e, ResponseDelta)
                )
                assert first_delta.seq == 0
                async with run_worker(settings, newcomer_engine) as newcomer:
                    streams = await asyncio.gather(*[_collect(client, t) for t in turn_ids])
                    await wait_for_assignment(first, newcomer)  # the rebalance completed
        finally:
            await edge.stop()
    for events in streams:
        kinds = [type(e) for e in events]
        assert ResponseRestarted not in kinds
        assert isinstance(events[-1], ResponseDone) and events[-1].finish_reason == "stop"
    assert newcomer_engine.requests == []  # nothing moved was answered a second time
    for turn_id in turn_ids:
        assert await completions_of(settings, turn_id) == 1


async def _collect(client: EdgeClient, turn_id: str) -> list:
    return [e async for e in client.events(turn_id)]
