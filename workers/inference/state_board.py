"""What an inference worker writes on its pool's state board (`runtime.state_board`): the
partitions of the pool's topic it owns now (so after a rebalance the router follows within one
interval), its engine's batch and KV-cache use, its queue and its recent prompt prefixes, and,
when it follows its engine's KV events, how the engine names its blocks (the blocks
themselves are in their own Redis set: `kv_mirror`).
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from runtime.state_board import owned_partitions
from schemas.worker_state import WorkerState
from workers.inference.engines.engine import Engine
from workers.inference.kv_mirror import KvMirror
from workers.inference.service import InferenceService


def inference_state(
    *,
    service: InferenceService,
    engine: Engine,
    consumer: AIOKafkaConsumer,
    topic: str,
    worker_id: str,
    pool: str,
    capacity: int,
    clock_ms: Callable[[], float],
    kv_mirror: KvMirror | None = None,
) -> Callable[[], WorkerState]:
    def state() -> WorkerState:
        snapshot = engine.snapshot()
        return WorkerState(
            worker_id=worker_id,
            pool=pool,
            at_ms=clock_ms(),
            partitions=owned_partitions(consumer, topic),
            capacity=capacity,
            running=snapshot.running,
            waiting=snapshot.waiting,
            queue_depth=service.gauges.queued,
            in_flight=service.gauges.held,
            kv_cache_usage=snapshot.kv_cache_usage,
            prefilling_tokens=service.prefilling_tokens,
            prefixes=service.prefixes.summary(),
            kv_blocks=kv_mirror.state() if kv_mirror is not None else None,
        )

    return state
