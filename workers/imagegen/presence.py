"""The image worker's entry on the `imagegen` board in Redis: the assembly job routes a
picture request here only while some image worker is live, and answers
`image_generation_unavailable` otherwise (no turn waits on a topic nobody reads).

The entry has the inference workers' shape (`schemas.worker_state`) and is written, expired
and removed by the same board (`runtime.state_board`): the partitions of `images.requested`
this worker owns and the turns it holds; there is no engine batch, KV cache or prefix cache
to report.
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from runtime.state_board import owned_partitions
from schemas.worker_state import WorkerState
from workers.imagegen.service import ImageGenService

POOL = "imagegen"  # the board's name (not an inference pool; stream_jobs routing knows it)


def presence_state(
    *,
    service: ImageGenService,
    consumer: AIOKafkaConsumer,
    topic: str,
    worker_id: str,
    clock_ms: Callable[[], float],
) -> Callable[[], WorkerState]:
    def state() -> WorkerState:
        return WorkerState(
            worker_id=worker_id,
            pool=POOL,
            at_ms=clock_ms(),
            partitions=owned_partitions(consumer, topic),
            capacity=1,
            running=min(service.held, 1),
            queue_depth=max(0, service.held - 1),
            in_flight=service.held,
        )

    return state
