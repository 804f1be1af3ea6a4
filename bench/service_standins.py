"""In-process stand-ins for Redis and Kafka, so the inference service's per-turn path runs
where neither exists (the GPU check machine).

What this measures, and what not: `InferenceService.run_turn` runs for real (the turn's
checks, the conversation lock, the engine stream, progress and usage accounting, token
chunks and the completion built and encoded with the wire codec, the outcome recorded
through the real `OutcomeRecorder`), but every Redis and Kafka call returns at once and
frames go to a recorder instead of the relay's Redis script: no network hop, broker or
edge. So it is the worker's own overhead on top of the engine, not the deployed
pipeline's (bench/pipeline_latency.py measures that on real Kafka and Redis).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from schemas.codec import encode
from schemas.events import TokenChunk, TurnCompleted
from workers.runtime.relay import LogLimits


class NullPipeline:
    """`redis.pipeline()`: nothing recorded, nothing cancelled."""

    def __init__(self) -> None:
        self._results: list[Any] = []

    async def __aenter__(self) -> NullPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def get(self, key: str) -> None:
        self._results.append(None)

    def exists(self, *keys: str) -> None:
        self._results.append(0)

    def set(self, key: str, value: bytes, **options: Any) -> None:
        self._results.append(None if options.get("get") else True)  # SET … GET: nothing was there

    def delete(self, *keys: str) -> None:
        self._results.append(0)

    async def execute(self) -> list[Any]:
        results, self._results = self._results, []
        return results


class NullRedis:
    def pipeline(self, transaction: bool = True) -> NullPipeline:
        return NullPipeline()

    async def exists(self, *keys: str) -> int:
        return 0

    async def get(self, key: str) -> None:
        return None

    async def set(self, key: str, value: bytes, **options: Any) -> bool:
        return True

    async def delete(self, *keys: str) -> int:
        return 0

    async def publish(self, channel: str, message: bytes) -> int:
        return 0


class NullProducer:
    """Kafka: records are dropped once handed over (already encoded by the service)."""

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        return None

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        return None


class RecordingRelay:
    """The relay: each frame is encoded as the real one encodes it, then handed to the
    turn's queue (`frames(turn_id)`) instead of Redis."""

    attempt_lease_s = LogLimits().attempt_lease_s  # the service claims each turn's lease

    def __init__(self) -> None:
        self._queues: defaultdict[str, asyncio.Queue] = defaultdict(asyncio.Queue)

    def frames(self, turn_id: str) -> asyncio.Queue:
        return self._queues[turn_id]

    def forget(self, turn_id: str) -> None:
        self._queues.pop(turn_id, None)

    def publish(self, channel: str, event: Any) -> None:
        encode(event)
        if isinstance(event, TokenChunk | TurnCompleted):
            self._queues[event.turn_id].put_nowait(event)

    async def publish_confirmed(self, channel: str, event: Any) -> None:
        self.publish(channel, event)
