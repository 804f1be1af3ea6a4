"""Test fixtures: the real local services (started once), namespaces per session, a leak
check on every test.

Services come from the project's own scripts (`infra/services.sh start`); `.ci/run` starts
them before the tests, and a developer's first test run starts them if they are down.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from runtime.settings import Settings

REPO = Path(__file__).resolve().parent.parent
# every edge a test starts (and the processes it starts) takes a free port for its HTTP door,
# as the tests give the WebSocket door one (edge_port=0): several edges run side by side
os.environ.setdefault("TURNSTREAM_EDGE_HTTP_PORT", "0")


def _port_open(host_port: str) -> bool:
    host, port = host_port.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def services(base_settings: Settings) -> Settings:
    """Kafka and Redis up (started by infra/services.sh when they are not)."""
    redis_hostport = base_settings.redis_url.split("//", 1)[1].split("/", 1)[0]
    if not (_port_open(base_settings.kafka_bootstrap) and _port_open(redis_hostport)):
        subprocess.run([str(REPO / "infra" / "services.sh"), "start"], check=True, cwd=REPO)
    return base_settings


@pytest.fixture(scope="session")
def session_namespace() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def test_models_dir(base_settings: Settings) -> Path:
    path = base_settings.state_path / "test-models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _is_ours(task: asyncio.Task) -> bool:
    """Tasks running turnstream code (library-internal tasks, e.g. aiokafka's fetchers of a
    session-wide consumer, come and go on their own and are not the test's)."""
    code = getattr(task.get_coro(), "cr_code", None)
    filename = code.co_filename if code is not None else ""
    return filename.startswith(str(REPO)) and "/.venv/" not in filename


@pytest.fixture(autouse=True)
async def no_leaked_tasks():
    """Fail a test that leaves its own asyncio tasks running behind it."""
    before = set(asyncio.all_tasks())
    yield
    leaked: list[asyncio.Task] = []
    for _ in range(100):
        leaked = [
            t
            for t in asyncio.all_tasks() - before
            if not t.done() and t is not asyncio.current_task() and _is_ours(t)
        ]
        if not leaked:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"test leaked {len(leaked)} task(s): {[t.get_coro() for t in leaked][:5]}")


def pytest_collection_modifyitems(config, items):
    """The `gpu` marker needs CUDA; everything else runs everywhere (CI runs it all)."""
    has_gpu = os.path.exists("/dev/nvidia0")
    skip_gpu = pytest.mark.skip(reason="needs a GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)
