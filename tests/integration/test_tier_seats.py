"""Tiers inside a worker that free-tier turns saturate (real Kafka and Redis, the fake engine
at 0.1 s a token): the worker holds its engine's batch seats by tier, so an enterprise turn
starts on the seat kept for the higher tiers while free turns wait, instead of behind them.
Ordering, not timing: at the enterprise turn's first token, no free turn that was waiting
has started."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import pytest

from harness.factories import new_conversation_id as conv
from harness.polling import eventually
from harness.stack import pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone

pytestmark = pytest.mark.integration

UNLIMITED = {  # the test is about seats, not about admission refusing the free tier
    "requests_per_minute": 100_000,
    "request_burst": 1_000,
    "tokens_per_minute": 1e9,
    "token_burst": 100_000_000,
    "degrade_at": 1_000,
    "reject_at": 1_000,
}
LONG = " ".join(f"word{i}" for i in range(60))  # echoed back: ~65 tokens, ~6.5 s


async def test_an_enterprise_turn_takes_the_kept_seat_past_free_turns_filling_the_batch(
    services, tmp_path
):
    registry = tmp_path / "tenants.json"
    tenants = {
        "freeco": {"tier": "free", "limits": UNLIMITED},
        "bigco": {"tier": "enterprise", "limits": UNLIMITED},
    }
    registry.write_text(json.dumps({"tenants": tenants}))
    settings = Settings.from_env(
        namespace=f"seats-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        tenant_registry_path=str(registry),
        max_inflight_turns=4,  # four seats, one kept for plus and up
        reserved_seats=1,
    )
    started: dict[str, int] = {}  # turn -> order of its first token

    async def follow(client: EdgeClient, turn_id: str) -> None:
        async for event in client.events(turn_id):
            if isinstance(event, ResponseDelta):
                started.setdefault(turn_id, len(started))
            if isinstance(event, ResponseDone):
                return

    async with (
        pipeline(settings, FakeEngine(token_interval_s=0.1)) as running,
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [
            await stack.enter_async_context(
                EdgeClient.connect(running.url, running.token(f"u{i}", "freeco"))
            )
            for i in range(7)
        ]
        free = [await c.start_turn(conv(), LONG) for c in clients]
        followers = [
            asyncio.ensure_future(follow(c, t)) for c, t in zip(clients, free, strict=True)
        ]
        try:
            await eventually(lambda: len(started) >= 3, timeout_s=30)
            await asyncio.sleep(0.5)  # a fourth free turn would have started by now if it could
            assert len(started) == 3, started  # the fourth seat is kept
            async with EdgeClient.connect(running.url, running.token("boss", "bigco")) as boss:
                turn = await boss.start_turn(conv(), "short question")
                await follow(boss, turn)
            assert started[turn] == 3, started  # before every free turn that was waiting
            for client, turn_id in zip(clients, free, strict=True):
                await client.cancel(turn_id)
            await asyncio.gather(*followers)
        finally:
            for follower in followers:
                follower.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
