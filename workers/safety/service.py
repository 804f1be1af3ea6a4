"""The safety worker: windows of streaming answers in (the Redis list
`RedisNames.safety_windows_key`, a work queue: `workers/runtime/work_list.py`), verdicts out.

A verdict goes to the Redis channel the window names (`reply_to`: the inference worker
streaming that answer, waiting to release or cut), and only there: that worker records the
verdicts it received on the turn's `turn.completed`, where the events log reads them (one
Kafka record per turn instead of one per window). A verdict that came too late for the
stream (optimistic mode went on: `unaudited`) is not in the log; the audit then reads the
answer itself (`workers/audit`).

The check is synchronous (~5 ms a window with the category classifier,
~40 ms in Hindi), so it runs in a worker thread, off the event loop; windows that arrive
while one is being checked are checked together next (`Coalescing`: no waiting when idle,
the classifier's batch shared under load); a check that fails on
odd text still yields a verdict (the rules decide, the error is recorded), so no window is
left without an answer. A window older than the stream's deadline when it is popped (a
backlog behind a dead or overloaded worker) gets no verdict: its stream has decided already
(hold-back failed closed, optimistic went on unaudited), so judging it would only make the
backlog longer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from moderation.recording import verdict_event
from moderation.screen import OutputCheck
from moderation.verdict import Verdict
from schemas.codec import encode
from schemas.events import (
    AnyEvent,
    OutputWindow,
    SafetyAction,
    SafetyStage,
)
from workers.runtime.coalescing import Coalescing

log = logging.getLogger("turnstream.safety")


@dataclass(frozen=True, slots=True)
class SafetyServiceConfig:
    worker_id: str
    deadline_ms: float = float("inf")  # a window older than this is not judged


class SafetyService:
    def __init__(
        self,
        *,
        redis: Redis,
        check: OutputCheck,
        config: SafetyServiceConfig,
        clock_ms: Callable[[], float],
    ) -> None:
        self.redis = redis
        self.check = check
        self.config = config
        self.clock_ms = clock_ms
        self.checks: Coalescing[str, Verdict] = Coalescing(check.check_many, max_batch=16)
        self.judged = 0
        self.cut = 0
        self.expired = 0  # windows popped after their stream's deadline: not judged

    async def handle(self, event: AnyEvent) -> None:
        if not isinstance(event, OutputWindow):
            log.warning("ignoring %s on the windows topic", type(event).__name__)
            return
        if self.clock_ms() - event.sent_at_ms > self.config.deadline_ms:
            self.expired += 1
            return
        verdict = await self.checks.run(event.text)  # ~5 ms, in a thread, batched under load
        if verdict.error:
            log.warning("turn %s window %d: %s", event.turn_id, event.index, verdict.error)
        answer = verdict_event(
            event,
            SafetyStage.OUTPUT,
            verdict,
            judged_text=event.text,
            checker=self.config.worker_id,
            now_ms=self.clock_ms(),
            window=event.index,
        )
        await self.redis.publish(event.reply_to, encode(answer))
        self.judged += 1
        self.cut += answer.action == SafetyAction.CUT

    async def fail_window(self, event: AnyEvent, reason: str) -> None:
        """Handling failed unexpectedly (Redis down past retries): the stream's own deadline
        decides (hold-back fails closed, optimistic goes on unaudited)."""
        log.error("no verdict for %s: %s", getattr(event, "turn_id", "?"), reason)
