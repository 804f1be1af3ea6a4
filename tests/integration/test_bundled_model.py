"""The main job's processes on the bundled SmolLM2, started as the stack starts them
(`runtime.processes.start_roles`): a typed question and a spoken follow-up, answered for real."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from harness.media import espeak_wav, words
from infra.stack import REPO
from runtime.kafka_topics import ensure_topics
from runtime.processes import free_port, start_roles, stop_roles
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir
from ws_edge.auth import mint_token
from ws_edge.client import EdgeClient, audio_part
from ws_edge.messages import InputTranscript

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


async def test_bundled_smollm2_answers_through_the_real_processes(services, session_namespace):
    model_dir = default_model_dir(services)
    await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "runtime.smollm2"], check=True, cwd=REPO
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
    spoken = espeak_wav("And the capital of Italy?")  # espeak + whisper tiny: clear enough
    children = await asyncio.to_thread(start_roles, env, logs, log_prefix="test-smol-")
    try:
        token = mint_token(Settings.from_env().auth_secret, "tester", "local")
        async with EdgeClient.connect(f"ws://127.0.0.1:{port}/", token) as client:
            first = await client.ask("geo", "What is the capital of France?", max_tokens=32)
            turn_id = await client.start_turn("geo", "", parts=[audio_part(spoken)], max_tokens=32)
            events = [e async for e in client.events(turn_id)]
    finally:
        await asyncio.to_thread(stop_roles, children)
    heard, second = events[0], events[-1]
    assert "Paris" in first.text, first.text
    assert isinstance(heard, InputTranscript) and "italy" in words(heard.text), heard
    assert "Rome" in second.text, second.text  # only answerable with the first turn in context
    assert first.model == "smollm2-135m-instruct"
    assert [c.process.returncode for c in children] == [0] * len(children)  # clean SIGTERM
