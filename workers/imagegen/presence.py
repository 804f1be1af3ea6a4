"""The image worker's entry on the `imagegen` board in Redis: the assembly job routes a
picture request here only while some image worker is live, and answers
`image_generation_unavailable` otherwise (no turn waits on a topic nobody reads).

The entry has the inference workers' shape (`schemas.worker_state`) and is written, expired
and removed the same way (`workers.inference.state_board`): the partitions of
`images.requested` this worker owns and the turns it holds; there is no engine batch, KV
cache or prefix cache to report.
"""

from __future__ import annotations

from schemas.worker_state import WorkerState
from workers.imagegen.service import ImageGenService
from workers.inference.state_board import StateBoard

POOL = "imagegen"  # the board's name (not an inference pool; stream_jobs routing knows it)


class ImagePresence(StateBoard):
    def __init__(self, *, service: ImageGenService, **board) -> None:
        super().__init__(service=None, engine=None, pool=POOL, capacity=1, **board)  # type: ignore[arg-type]
        self.images = service

    def state(self) -> WorkerState:
        partitions = sorted(
            tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic
        )
        return WorkerState(
            worker_id=self.worker_id,
            pool=self.pool,
            at_ms=self.clock_ms(),
            partitions=partitions,
            capacity=self.capacity,
            running=min(self.images.held, 1),
            queue_depth=max(0, self.images.held - 1),
            in_flight=self.images.held,
        )
