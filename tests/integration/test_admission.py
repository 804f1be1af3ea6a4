"""Admission at a real edge (real Kafka, real Redis): tiers come from the server's registry,
bursts hit the tenant's bucket with a clear retry hint, other tenants are unaffected, forged
tier claims change nothing, and overload degrades the free tier before refusing it while
enterprise is still served. The pool's load is written to the real state board as workers
write it (`harness.board`; no worker runs here: admission happens before anything reaches
Kafka)."""

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
from runtime.kafka_topics import ensure_topics
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import TurnSubmitted
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

        server.admission.load.forget()  # read the board again now
        await write_load(settings, in_flight=7)  # 0.88: past free's reject_at 0.8
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
