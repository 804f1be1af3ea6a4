"""One conversation flooded from several sessions cannot hold all of a worker's slots."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness.stack import pipeline
from runtime.settings import Settings
from schemas.events import FinishReason
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration


async def test_a_flooded_conversation_gets_busy_answers_and_others_flow(
    services, session_namespace
):
    settings = Settings.from_env(
        namespace=f"{session_namespace}-fair", edge_port=0, max_queued_per_conversation=1
    )
    async with pipeline(settings, FakeEngine(token_interval_s=0.02)) as running:
        flooded = f"c-{uuid.uuid4().hex[:8]}"
        async with (
            EdgeClient.connect(running.url, running.token("zoe")) as first,
            EdgeClient.connect(running.url, running.token("zoe")) as second,
            EdgeClient.connect(running.url, running.token("yan")) as bystander,
        ):
            long_turn = await first.start_turn(flooded, "a long answer please " * 5)
            await anext(first.events(long_turn))  # it is running on the worker now
            busy, other = await asyncio.gather(
                second.ask(flooded, "me too"), bystander.ask(f"c-{uuid.uuid4().hex[:8]}", "hi")
            )
            done = [e async for e in first.events(long_turn)][-1]
            retried = await second.ask(flooded, "me too, again")
    assert busy.finish_reason == FinishReason.ERROR and busy.error is not None
    assert busy.error.code == "conversation_busy" and busy.error.retryable
    assert other.finish_reason == FinishReason.STOP
    assert done.finish_reason == FinishReason.STOP
    assert retried.finish_reason == FinishReason.STOP and retried.text.endswith("(turn 2)")
