"""The pipeline with several inference workers of one pool (worker ids w0, w1, ...), each on
its own engine, the assembly job picking among them: what the routing benchmark and the
routing tests run (edge, preprocess, Kafka, Redis and the assembly job all real)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.stack import running_assembly
from runtime.engine_cores import BIND, RESERVED, engine_cores
from runtime.kafka_topics import ensure_topics
from runtime.redis import redis_client
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.topics import POOL_PARTITIONS
from schemas.worker_state import WorkerState, decode_state
from workers.inference.app import RunningWorker, run_worker
from workers.inference.engines.engine import Engine
from workers.preprocess.app import run_preprocessor
from ws_edge.auth import mint_token
from ws_edge.server import EdgeServer

E = TypeVar("E")


def engines_on_own_cores(build: Callable[[], E], count: int) -> list[E]:
    """`count` in-process engines, each vLLM CPU engine bound to its own share of this
    machine's cores (`runtime.engine_cores`): vLLM's `auto` would pin them all to core 0."""
    cores = sorted(os.sched_getaffinity(0))
    saved = {name: os.environ.get(name) for name in (BIND, RESERVED)}
    engines = []
    try:
        for worker in range(1, count + 1):
            os.environ[BIND] = engine_cores(worker, count, cores)  # read when its core spawns
            os.environ[RESERVED] = "0"
            engines.append(build())
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return engines


@dataclass
class RoutedPipeline:
    settings: Settings
    edge: EdgeServer
    workers: list[RunningWorker]
    engines: Sequence[Engine]
    tenant: str
    _stacks: list[contextlib.AsyncExitStack]

    async def stop_worker(self, index: int) -> None:
        """Stop worker w<index> as a deployment would (drained; its engine stays open)."""
        await self._stacks[index].aclose()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.edge.port}/"

    def token(self, user: str = "bench", tenant: str = "") -> str:
        return mint_token(self.settings.auth_secret, user, tenant or self.tenant)


@contextlib.asynccontextmanager
async def routed_pipeline(
    settings: Settings, engines: Sequence[Engine], *, tenant: str = "bench"
) -> AsyncIterator[RoutedPipeline]:
    """`harness.stack.pipeline` with one inference worker per engine, without the safety
    worker; the assembly job picks with the settings' `routing_strategy`. Yields once every
    worker is on the state board owning partitions."""
    await ensure_topics(settings.kafka_bootstrap, settings.namespace)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running_assembly(settings))
        workers, stacks = [], []
        for i, engine in enumerate(engines):
            own = dataclasses.replace(settings, worker_id=f"w{i}")
            worker_stack = await stack.enter_async_context(contextlib.AsyncExitStack())
            workers.append(await worker_stack.enter_async_context(run_worker(own, engine)))
            stacks.append(worker_stack)
        await stack.enter_async_context(run_preprocessor(settings))
        edge = EdgeServer(settings)
        await edge.start()
        stack.push_async_callback(edge.stop)
        assert await edge.publisher.wait_connected(30), "edge could not reach Kafka"
        await wait_for_board(settings, len(engines))
        yield RoutedPipeline(settings, edge, workers, engines, tenant, stacks)


async def board_states(settings: Settings, pool: str = "") -> list[WorkerState]:
    """The pool's state board now (default: the settings' pool)."""
    redis = redis_client(settings.redis_url)
    key = RedisNames.for_namespace(settings.namespace).worker_states_key(pool or settings.pool)
    try:
        return [decode_state(v) for v in (await redis.hgetall(key)).values()]
    finally:
        await redis.aclose()


async def wait_for_board(settings: Settings, workers: int, timeout_s: float = 90) -> None:
    """Until each worker's state shows partitions and together they own the whole topic
    (the consumer group has settled)."""
    async with asyncio.timeout(timeout_s):
        while True:
            states = await board_states(settings)
            owned = sorted(p for s in states for p in s.partitions)
            settled = owned == list(range(POOL_PARTITIONS))
            if len(states) == workers and settled and all(s.partitions for s in states):
                return
            await asyncio.sleep(0.25)
