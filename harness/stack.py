"""A pipeline for tests, in its own namespace on the real Kafka and Redis: the preprocessing
worker, the inference worker (any engine) and an edge on port 0 in this process, the
assembly job (a faust worker) as a child process, as in production."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from runtime.kafka_topics import ensure_topics
from runtime.processes import Child
from runtime.settings import Settings, settings_env
from workers.inference.app import RunningWorker, run_worker
from workers.inference.engines.engine import Engine
from workers.preprocess.app import run_preprocessor
from workers.preprocess.service import PreprocessService
from workers.runtime.running import RunningService
from workers.safety.app import run_safety_worker
from workers.tools.app import run_tools_worker
from workers.tools.mcp_servers import McpServers
from workers.tts.app import run_tts_worker
from workers.tts.service import TtsService
from ws_edge.auth import mint_token
from ws_edge.server import EdgeServer


@dataclass
class Pipeline:
    settings: Settings
    edge: EdgeServer
    worker: RunningWorker
    engine: Engine
    preprocess: RunningService[PreprocessService] | None = None
    tts: RunningService[TtsService] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.edge.port}/"

    def token(self, user: str = "alice", tenant: str = "acme") -> str:
        return mint_token(self.settings.auth_secret, user, tenant)


@contextlib.contextmanager
def stream_job(settings: Settings, name: str, **env: str) -> Iterator[Child]:
    """The faust job `stream_jobs.<name>` for the settings' namespace, until the block ends."""
    logs = settings.state_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    child_env = {**os.environ, **settings_env(settings), "PYTHONUNBUFFERED": "1", **env}
    job = Child(
        f"{name} job",
        f"stream_jobs.{name}",
        logs / f"{name}-{settings.namespace or 'default'}.log",
        child_env,
    )
    try:
        job.wait_ready(timeout_s=120)
        yield job
    finally:
        job.stop()


@contextlib.asynccontextmanager
async def running_job(settings: Settings, name: str, **env: str) -> AsyncIterator[Child]:
    """`stream_job` without blocking the event loop while it starts and stops."""
    cm = stream_job(settings, name, **env)
    job = await asyncio.to_thread(cm.__enter__)
    try:
        yield job
    finally:
        await asyncio.to_thread(cm.__exit__, None, None, None)


def running_assembly(settings: Settings, **env: str):
    return running_job(settings, "assembly", **env)


@contextlib.asynccontextmanager
async def another_edge(
    running: Pipeline, suffix: str = "b", **changes: object
) -> AsyncIterator[EdgeServer]:
    """Another edge node of the same pipeline (the same Kafka, Redis and namespace) on
    ports of its own; `changes`: settings it differs in."""
    settings = dataclasses.replace(running.settings, **changes) if changes else running.settings
    edge = EdgeServer(settings, edge_id=f"{running.edge.edge_id}-{suffix}")
    await edge.start()
    try:
        yield edge
    finally:
        await edge.stop()


@contextlib.asynccontextmanager
async def pipeline(
    settings: Settings,
    engine: Engine,
    *,
    with_assembly: bool = True,
    with_safety: bool = True,
    with_tts: bool = False,
    tools: McpServers | None = None,
) -> AsyncIterator[Pipeline]:
    """`with_assembly=False`: the caller runs (and restarts) the assembly job itself.
    `with_safety=False`: no safety worker answers the output check (it is down).
    `with_tts`: a TTS worker speaks the answers that ask for speech.
    `tools`: a tools worker runs these MCP servers' calls (started; the caller closes them;
    the edge offers them under `settings.tool_allow`)."""
    await ensure_topics(
        settings.kafka_bootstrap,
        settings.namespace,
        replication_factor=settings.kafka_replication_factor,
    )
    checks_output = with_safety and settings.safety_output_policy != "off"
    async with (
        running_assembly(settings) if with_assembly else contextlib.nullcontext(),
        run_safety_worker(settings) if checks_output else contextlib.nullcontext(),
        run_worker(settings, engine) as worker,
        run_preprocessor(settings) as preprocess,
        run_tts_worker(settings) if with_tts else contextlib.nullcontext() as tts,
        run_tools_worker(settings, tools) if tools is not None else contextlib.nullcontext(),
    ):
        edge = EdgeServer(settings)
        await edge.start()
        assert await edge.publisher.wait_connected(30), "edge could not reach Kafka"
        try:
            yield Pipeline(settings, edge, worker, engine, preprocess, tts)
        finally:
            await edge.stop()
