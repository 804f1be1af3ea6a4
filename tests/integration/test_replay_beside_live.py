"""A replay job beside the live stack: the live sink holds the embedded store (one process
may open it) and serves it; the candidate's workers (`--start-stack`) write their traces
into that same store through the live sink's interface, under the run's id, while the
live sink keeps serving."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from harness.analyst_store import running_sink
from harness.factories import submitted
from harness.polling import eventually
from infra.stack import REPO
from runtime.settings import settings_env
from schemas.codec import encode
from schemas.ids import now_ms
from schemas.topics import TURNS_SUBMITTED

pytestmark = pytest.mark.integration

TURNS = 3


async def test_a_replay_beside_the_live_sink_lands_its_traces_in_the_live_store(services, tmp_path):
    async with running_sink(tmp_path / "home") as live_sink:
        live = live_sink.settings
        tenant = f"replayed-{uuid.uuid4().hex[:6]}"
        producer = AIOKafkaProducer(bootstrap_servers=live.kafka_bootstrap)
        await producer.start()
        try:
            for i in range(TURNS):
                turn = submitted(
                    f"{tenant}-{i}",
                    tenant_id=tenant,
                    conversation_id=f"{tenant}-c{i}",
                    text=f"What is {i} plus {i}?",
                    submitted_at_ms=now_ms(),
                )
                topic = TURNS_SUBMITTED.full_name(live.namespace)
                await producer.send_and_wait(topic, encode(turn), turn.conversation_id.encode())
        finally:
            await producer.stop()
        run_id = f"beside-{uuid.uuid4().hex[:6]}"
        replay = await asyncio.to_thread(
            subprocess.run,
            [
                sys.executable, "-m", "producers.replay", "--topic", "turns.submitted",
                "--since", "1h", "--tenant", tenant, "--engine", "fake", "--start-stack",
                "--run-id", run_id, "--out", str(tmp_path / "runs"), "--turn-timeout-s", "90",
            ],
            cwd=REPO,
            env={**os.environ, **settings_env(live)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stderr[-3000:]
        assert f"{TURNS}/{TURNS} answered" in replay.stdout
        client = live_sink.client()
        count = f"SELECT count() FROM turnstream.traces FINAL WHERE run_id = '{run_id}'"

        async def landed() -> bool:
            return await asyncio.to_thread(client.command, count) == TURNS

        await eventually(landed, timeout_s=60)
        tenants = client.query(
            f"SELECT groupUniqArray(tenant_id) FROM turnstream.traces WHERE run_id = '{run_id}'"
        ).result_rows
        assert tenants == [([tenant],)]
        live_count = f"SELECT count() FROM turnstream.traces WHERE tenant_id = '{live_sink.tenant}'"
        assert client.command(live_count) >= 1  # the live store and its sink served throughout
