"""The main job's processes on the bundled SmolLM2: `python -m workers.inference` and
`python -m ws_edge`, started as the stack starts them, answering a real question."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from infra.kafka.topics import ensure_topics
from infra.models.smollm2 import default_model_dir
from infra.stack import REPO, Child, free_port
from schemas.settings import Settings
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


async def test_bundled_smollm2_answers_through_the_real_processes(services, session_namespace):
    model_dir = default_model_dir(services)
    await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "infra.models.smollm2"], check=True, cwd=REPO
    )
    assert (model_dir / "config.json").is_file()
    namespace = f"{session_namespace}-smol"
    await ensure_topics(services.kafka_bootstrap, namespace)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TURNSTREAM_NAMESPACE": namespace,
        "TURNSTREAM_EDGE_PORT": str(port),
        "TURNSTREAM_ENGINE": "vllm",
        "TURNSTREAM_KV_CACHE_BYTES": str(256 * 1024 * 1024),
    }
    logs = services.state_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    worker = Child("inference worker", "workers.inference", logs / "test-smol-worker.log", env)
    children = [worker]
    try:
        await asyncio.to_thread(worker.wait_ready, 300)
        edge = Child("edge", "ws_edge", logs / "test-smol-edge.log", env)
        children.append(edge)
        await asyncio.to_thread(edge.wait_ready, 60)
        token = mint_token(Settings.from_env().auth_secret, "tester", "local")
        async with EdgeClient.connect(f"ws://127.0.0.1:{port}/", token) as client:
            first = await client.ask("geo", "What is the capital of France?", max_tokens=32)
            second = await client.ask("geo", "And of Italy?", max_tokens=32)
    finally:
        for child in reversed(children):
            await asyncio.to_thread(child.stop)
    assert "Paris" in first.text, first.text
    assert "Rome" in second.text, second.text  # only answerable with the first turn in context
    assert first.model == "smollm2-135m-instruct"
    assert [c.process.returncode for c in children] == [0] * len(children)  # clean SIGTERM
