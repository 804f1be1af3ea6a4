from __future__ import annotations

import pytest

from schemas.settings import Settings
from tests.support.stack import pipeline
from workers.inference.fake_engine import FakeEngine

FAIL_TRIGGER = "PLEASE FAIL"


@pytest.fixture(scope="session")
def fake_settings(services: Settings, session_namespace: str) -> Settings:
    return Settings.from_env(
        namespace=f"{session_namespace}-fake",
        edge_port=0,
        max_message_bytes=8 * 1024,
        max_frame_bytes=64 * 1024,
        max_turn_chars=4000,
        max_turns_in_flight_per_session=4,
    )


@pytest.fixture(scope="session")
async def fake_pipeline(fake_settings: Settings):
    """Edge → Kafka → worker (fake engine, 5 ms per token) → Redis → edge."""
    engine = FakeEngine(token_interval_s=0.005, fail_on=FAIL_TRIGGER)
    async with pipeline(fake_settings, engine) as running:
        yield running
