"""Admission at a real edge (real Kafka, real Redis): tiers come from the server's registry,
bursts hit the tenant's bucket with a clear retry hint, other tenants are unaffected, forged
tier claims change nothing, and overload degrades the free tier before refusing it while
enterprise is still served. The pool's load is written to the real state board as workers
write it (`harness.board`; no worker runs here: admission happens before anything reaches
Kafka). On the fake pipeline: a turn is charged what it cost (its whole prompt, history
included, and its answer), even when its client left before the answer ended."""

from __future__ import annotations

import contextlib
import json
import time
import uuid

import jwt
import pytest

from harness.board import write_load
from harness.factories import new_conversation_id as conv
from harness.kafka import find_record
from harness.polling import eventually
from harness.stack import another_edge
from runtime.kafka_topics import ensure_topics
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.events import TurnCompleted, TurnSubmitted
from ws_edge.auth import ISSUER, mint_token
from ws_edge.client import EdgeClient, TurnRejected
from ws_edge.server import EdgeServer

pytestmark = pytest.mark.integration

SLOW = {"tier": "free", "limits": {"requests_per_minute": 0.01, "request_burst": 3}}


@contextlib.asynccontextmanager
async def edge(services: Settings, tmp_path, tenants: dict):
    registry = tmp_path / "tenants.json"
    registry.write_text(json.dumps({"tenants": tenants}))
    settings = Settings.from_env(
        namespace=f"adm-{uuid.uuid4().hex[:6]}", edge_port=0, tenant_registry_path=str(registry)
    )
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    server = EdgeServer(settings)
    await server.start()
    try:
        yield server, settings
    finally:
        await server.stop()


def url(server: EdgeServer) -> str:
    return f"ws://127.0.0.1:{server.port}/"


async def sees_load(server: EdgeServer, pool: str = "chat") -> None:
    """Until the edge's admission has read the pool's load from the board, then keep that
    reading for the test. A read that misses its 200 ms budget (a first connection on a
    loaded machine) counts as no load by design; the turns here are about what admission
    does once it knows the load (a CI run saw the free turn admitted undegraded that way)."""
    load = server.admission.load

    async def seen() -> bool:
        load.forget()
        return pool in await load.signals()

    await eventually(seen, timeout_s=10)
    load.max_age_ms = float("inf")  # the turns that follow see exactly this reading


async def test_a_burst_is_cut_at_the_bucket_and_other_tenants_are_unaffected(services, tmp_path):
    async with edge(services, tmp_path, {"slowco": SLOW, "otherco": SLOW}) as (server, settings):
        token = mint_token(settings.auth_secret, "u", "slowco")
        async with EdgeClient.connect(url(server), token) as client:
            for _ in range(3):
                await client.start_turn(conv(), "hello")
            with pytest.raises(TurnRejected) as refused:
                await client.start_turn(conv(), "one more")
            error = refused.value.error
            assert error.code == "rate_limited" and error.retryable
            assert error.retry_after_ms is not None and error.retry_after_ms > 60_000
        # the same tenant under a token claiming a better tier: the registry decides
        forged = jwt.encode(
            {
                "sub": "u2",
                "tenant": "slowco",
                "tier": "enterprise",
                "iss": ISSUER,
                "exp": int(time.time()) + 600,
            },
            settings.auth_secret,
            algorithm="HS256",
        )
        async with EdgeClient.connect(url(server), forged) as client:
            with pytest.raises(TurnRejected) as refused:
                await client.start_turn(conv(), "I am enterprise, honest")
            assert refused.value.error.code == "rate_limited"
        other = mint_token(settings.auth_secret, "v", "otherco")
        async with EdgeClient.connect(url(server), other) as client:
            for _ in range(3):
                await client.start_turn(conv(), "hi")


async def test_overload_degrades_free_then_refuses_it_while_enterprise_is_served(
    services, tmp_path
):
    async with edge(services, tmp_path, {"bigco": "enterprise"}) as (server, settings):
        free = mint_token(settings.auth_secret, "f", "freeco")
        big = mint_token(settings.auth_secret, "b", "bigco")
        await write_load(settings, in_flight=5)  # 0.62: past free's degrade_at 0.5
        await sees_load(server)
        async with EdgeClient.connect(url(server), free) as client:
            turn_id = await client.start_turn(conv(), "long answer please", max_tokens=2000)
        record = await find_record(
            settings.kafka_bootstrap,
            f"{settings.namespace}.turns.submitted",
            lambda r: turn_id.encode() in r.value,
        )
        admitted = decode(record.value)
        assert isinstance(admitted, TurnSubmitted)
        assert (admitted.tier, admitted.degraded, admitted.pool) == ("free", True, "chat")
        assert admitted.decoding.max_tokens == 256  # free's degraded cap

        await write_load(settings, in_flight=7)  # 0.88: past free's reject_at 0.8
        await sees_load(server)  # read the board again now
        async with EdgeClient.connect(url(server), free) as client:
            with pytest.raises(TurnRejected) as refused:
                await client.start_turn(conv(), "anyone?")
            error = refused.value.error
            assert error.code == "overloaded" and error.retryable
            assert error.retry_after_ms == settings.overload_retry_after_ms
        async with EdgeClient.connect(url(server), big) as client:
            turn_id = await client.start_turn(conv(), "enterprise question", max_tokens=2000)
        record = await find_record(
            settings.kafka_bootstrap,
            f"{settings.namespace}.turns.submitted",
            lambda r: turn_id.encode() in r.value,
        )
        admitted = decode(record.value)
        assert (admitted.tier, admitted.degraded, admitted.priority) == ("enterprise", False, 20)
        assert admitted.decoding.max_tokens == 2000


PAYER = {
    "tier": "plus",
    "limits": {
        "requests_per_minute": 600,
        "request_burst": 100,
        "tokens_per_minute": 0.001,  # no refill to speak of: the level is what was charged
        "token_burst": 100_000,
    },
}


async def test_a_turn_is_charged_what_it_cost_even_when_its_client_left(fake_pipeline, tmp_path):
    """The token bucket pays for the whole prompt the engine read (the history too, not
    only the new text) and the answer; a client that disconnects mid-answer is charged
    when the answer ends, once."""
    registry = tmp_path / "tenants.json"
    registry.write_text(json.dumps({"tenants": {"payer": PAYER}}))
    async with another_edge(fake_pipeline, "billing", tenant_registry_path=str(registry)) as server:
        limits = server.admission.tenants.plan_of("payer").limits
        burst = limits.token_burst

        async def level() -> int:
            return await server.admission.limiter.charge("payer", limits, 0)

        token = mint_token(server.settings.auth_secret, "u", "payer")
        conversation = conv()
        async with EdgeClient.connect(url(server), token) as client:
            first = await client.ask(conversation, "hello there")
            second = await client.ask(conversation, "and again")
        spent = [d.usage.prompt_tokens + d.usage.completion_tokens for d in (first, second)]
        assert second.usage.prompt_tokens > first.usage.prompt_tokens  # its history too
        await eventually(lambda: _at(level, burst - sum(spent)), timeout_s=10)

        names = RedisNames.for_namespace(server.settings.namespace)
        async with EdgeClient.connect(url(server), token) as client:
            long_question = " ".join(f"{i % 10}z" for i in range(400))
            gone = await client.start_turn(conv(), long_question, max_tokens=1000)
        # the client went mid-answer; the answer goes on and ends
        redis = redis_client(server.settings.redis_url)
        try:
            await eventually(lambda: redis.exists(names.done_key(gone)), timeout_s=60)
            recorded = decode(await redis.get(names.done_key(gone)))
        finally:
            await redis.aclose()
        assert isinstance(recorded, TurnCompleted) and recorded.usage.completion_tokens > 100
        cost = recorded.usage.prompt_tokens + recorded.usage.completion_tokens
        await eventually(lambda: _at(level, burst - sum(spent) - cost), timeout_s=10)
        assert server.unattended.adopted == 1 and server.unattended.charged == 1


async def _at(level, expected: int) -> bool:
    """The bucket's level is `expected`, give or take the refill's rounding."""
    return abs(await level() - expected) <= 1
