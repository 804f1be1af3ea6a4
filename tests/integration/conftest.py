from __future__ import annotations

from pathlib import Path

import pytest

from harness.analyst_store import running_sink
from harness.mcp_servers.running import kv_store_server
from harness.stack import pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine

FAIL_TRIGGER = "PLEASE FAIL"


@pytest.fixture(scope="session")
def fake_settings(services: Settings, session_namespace: str) -> Settings:
    return Settings.from_env(
        namespace=f"{session_namespace}-fake",
        edge_port=0,
        max_message_bytes=8 * 1024,
        max_frame_bytes=3 * 1024 * 1024,
        max_media_bytes=2 * 1024 * 1024,
        max_audio_s=30.0,
        max_turn_chars=4000,
        max_turns_in_flight_per_session=4,
    )


@pytest.fixture(scope="session")
async def fake_pipeline(fake_settings: Settings):
    """Edge → Kafka → worker (fake engine, 5 ms per token) → Redis → edge."""
    engine = FakeEngine(token_interval_s=0.005, fail_on=FAIL_TRIGGER)
    async with pipeline(fake_settings, engine) as running:
        yield running


@pytest.fixture(scope="session")
def tiny_model_path(test_models_dir):
    from harness.tiny_model import build_tiny_model

    return build_tiny_model(test_models_dir / "tiny-llama-v1")


@pytest.fixture(scope="session")
async def tiny_engine(tiny_model_path):
    """One real vLLM engine on the tiny model for the whole session (start ~20-40 s)."""
    from workers.inference.engines.vllm_engine import VllmEngine, VllmOptions

    engine = VllmEngine(
        VllmOptions(
            model_path=str(tiny_model_path),
            model_name="tiny-llama",
            max_model_len=1024,
            kv_cache_bytes=128 * 1024 * 1024,
            max_num_seqs=16,
        )
    )
    yield engine
    await engine.close()


@pytest.fixture(scope="session")
async def vllm_pipeline(services: Settings, session_namespace: str, tiny_engine):
    settings = Settings.from_env(namespace=f"{session_namespace}-vllm", edge_port=0)
    async with pipeline(settings, tiny_engine) as running:
        yield running


@pytest.fixture
def kv_server(tmp_path: Path):
    """The key-value MCP server (streamable HTTP): its URL and its books of writes."""
    with kv_store_server(tmp_path) as (url, books):
        yield url, books


@pytest.fixture(scope="session")
async def sink(services: Settings, tmp_path_factory):
    """A sink serving the ClickHouse HTTP interface over traces and turns it wrote."""
    async with running_sink(tmp_path_factory.mktemp("http-sink")) as running:
        yield running
