"""An in-process pipeline for tests: a preprocessing worker, an inference worker (any engine)
and an edge on port 0, in their own namespace on the real Kafka and Redis."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from infra.kafka.topics import ensure_topics
from schemas.settings import Settings
from workers.inference.app import RunningWorker, run_worker
from workers.inference.engine import Engine
from workers.preprocess.app import run_preprocessor
from workers.preprocess.service import PreprocessService
from workers.runtime.running import RunningService
from ws_edge.auth import mint_token
from ws_edge.server import EdgeServer


@dataclass
class Pipeline:
    settings: Settings
    edge: EdgeServer
    worker: RunningWorker
    engine: Engine
    preprocess: RunningService[PreprocessService] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.edge.port}/"

    def token(self, user: str = "alice", tenant: str = "acme") -> str:
        return mint_token(self.settings.auth_secret, user, tenant)


@contextlib.asynccontextmanager
async def pipeline(settings: Settings, engine: Engine) -> AsyncIterator[Pipeline]:
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    async with run_worker(settings, engine) as worker, run_preprocessor(settings) as preprocess:
        edge = EdgeServer(settings)
        await edge.start()
        assert await edge.publisher.wait_connected(30), "edge could not reach Kafka"
        try:
            yield Pipeline(settings, edge, worker, engine, preprocess)
        finally:
            await edge.stop()
