"""Playing a replay plan into its namespace and collecting every turn's outcome.

The runner is a client of the pipeline like the edge: it publishes `turn.submitted` to the
namespace's topic and reads the outcomes from its `turns.completed` (from the start, with no
consumer group: the run owns the namespace). A conversation's next turn goes out when the
one before it is answered; `concurrency` conversations run at once. A turn that is not
answered within `turn_timeout_s` is recorded as `replay_timeout` (a candidate that crashed
or hangs), and the run goes on.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from producers.replay.plan import (
    PlannedConversation,
    PlannedTurn,
    pace_offsets_s,
    submitted_for,
)
from producers.turn_publisher import TurnPublisher
from runtime.blobs import BlobStore, blob_store
from runtime.cancelling import cancel_and_wait
from runtime.kafka_ranges import partitions_of, stop_consumer
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.codec import decode
from schemas.errors import DecodeError
from schemas.events import MediaKind, MediaRef, TurnCompleted, TurnSubmitted
from schemas.flywheel import Candidate, TurnResult
from schemas.ids import now_ms
from schemas.topics import TURNS_COMPLETED, TURNS_SUBMITTED
from schemas.traces import Prices

REPLAY_TIMEOUT = "replay_timeout"
MEDIA_TTL_S = 24 * 3600


@dataclass
class Tally:
    """The run's counts, for the progress line and the manifest."""

    total: int
    done: int = 0
    failed: int = 0
    timed_out: int = 0
    media_missing: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        return f"\rreplay {self.done}/{self.total} turns  {self.failed} failed  {rate:5.1f} turns/s"


@dataclass(frozen=True, slots=True)
class Target:
    """The namespace a run plays into: its Kafka, its blob store, where answers go."""

    bootstrap: str
    namespace: str
    blobs: BlobStore  # the namespace's
    source_blobs: BlobStore | None = None  # the recording's (media of recorded turns)
    edge_id: str = "replay"

    @classmethod
    def of(
        cls, settings: Settings, redis: Redis, *, edge_id: str, source: Settings | None = None
    ) -> Target:
        """The run's namespace as `settings` name it (`source`: the recording's settings,
        whose blobs the recorded turns' media are copied from)."""

        def blobs(of: Settings) -> BlobStore:
            return blob_store(of.blob_store_url, redis, RedisNames.for_namespace(of.namespace))

        return cls(
            bootstrap=settings.kafka_bootstrap,
            namespace=settings.namespace,
            blobs=blobs(settings),
            source_blobs=blobs(source) if source is not None else None,
            edge_id=edge_id,
        )


class Outcomes:
    """Reads the namespace's `turns.completed` and resolves each awaited turn."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        self._topic = topic
        self._waiting: dict[str, asyncio.Future[TurnCompleted]] = {}
        self._arrived: dict[str, TurnCompleted] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        partitions = await partitions_of(self._consumer, self._topic)
        if not partitions:
            raise RuntimeError(f"no topic {self._topic!r}: were the run's topics created?")
        tps = [TopicPartition(self._topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
        await stop_consumer(self._consumer)

    async def wait(self, turn_id: str, timeout_s: float) -> TurnCompleted:
        if turn_id in self._arrived:
            return self._arrived.pop(turn_id)
        future = asyncio.get_running_loop().create_future()
        self._waiting[turn_id] = future
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        finally:
            self._waiting.pop(turn_id, None)

    async def _read(self) -> None:
        async for record in self._consumer:
            try:
                event = decode(record.value)
            except DecodeError:
                continue
            if not isinstance(event, TurnCompleted):
                continue  # truncations share the topic
            waiting = self._waiting.get(event.turn_id)
            if waiting is not None and not waiting.done():
                waiting.set_result(event)
            else:
                self._arrived[event.turn_id] = event  # answered before we asked (a rerun)


def result_of(run_id: str, turn: PlannedTurn, completed: TurnCompleted) -> TurnResult:
    screening = completed.screening
    checked = completed.output_safety
    return TurnResult(
        run_id=run_id,
        item_id=turn.item_id,
        turn_id=completed.turn_id,
        index=turn.index,
        text=completed.text,
        finish_reason=str(completed.finish_reason),
        error_code=completed.error.code if completed.error is not None else "",
        model=completed.model,
        prompt_tokens=completed.usage.prompt_tokens,
        completion_tokens=completed.usage.completion_tokens,
        ttft_ms=completed.timings.ttft_ms,
        e2e_ms=completed.timings.e2e_ms,
        cost_usd=Prices().cost(
            completed.model, completed.usage.prompt_tokens, completed.usage.completion_tokens
        ),
        input_safety=str(screening.action) if screening is not None else "",
        output_cut=checked is not None and checked.cut_window >= 0,
        scored=turn.scored,
    )


def timed_out(run_id: str, turn: PlannedTurn, turn_id: str, waited_s: float) -> TurnResult:
    return TurnResult(
        run_id=run_id,
        item_id=turn.item_id,
        turn_id=turn_id,
        index=turn.index,
        text="",
        finish_reason="error",
        error_code=REPLAY_TIMEOUT,
        e2e_ms=waited_s * 1000,
        scored=turn.scored,
    )


class Replay:
    def __init__(
        self,
        target: Target,
        *,
        run_id: str,
        candidate: Candidate,
        media_root: Path | None = None,
        concurrency: int = 8,
        turn_timeout_s: float = 120.0,
        pace: str = "fast",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.target = target
        self.run_id = run_id
        self.candidate = candidate
        self.media_root = media_root
        self.concurrency = concurrency
        self.turn_timeout_s = turn_timeout_s
        self.pace = pace
        self.progress = progress or (lambda line: print(line, end="", file=sys.stderr))
        self.results: list[TurnResult] = []
        self.tally = Tally(0)

    async def run(self, conversations: list[PlannedConversation]) -> list[TurnResult]:
        self.tally = Tally(sum(len(c.turns) for c in conversations))
        ns = self.target.namespace
        publisher = TurnPublisher(
            self.target.bootstrap,
            TURNS_SUBMITTED.full_name(ns),
            client_id=f"replay-{self.run_id}",
            timeout_s=30,
        )
        outcomes = Outcomes(self.target.bootstrap, TURNS_COMPLETED.full_name(ns))
        await outcomes.start()
        await publisher.start()
        if not await publisher.wait_connected(30):
            await outcomes.stop()
            raise RuntimeError(f"cannot reach Kafka at {self.target.bootstrap}")
        offsets = pace_offsets_s(conversations) if self.pace == "recorded" else {}
        gate = asyncio.Semaphore(self.concurrency)
        began = time.monotonic()

        async def play(conversation: PlannedConversation) -> None:
            delay = offsets.get(conversation.conversation_id, 0.0) - (time.monotonic() - began)
            if delay > 0:
                await asyncio.sleep(delay)
            async with gate:
                for turn in conversation.turns:
                    await self._play_turn(publisher, outcomes, conversation, turn)

        try:
            await asyncio.gather(*(play(c) for c in conversations))
        finally:
            self.progress(self.tally.line() + "\n")
            await publisher.stop()
            await outcomes.stop()
        return self.results

    async def _play_turn(
        self,
        publisher: TurnPublisher,
        outcomes: Outcomes,
        conversation: PlannedConversation,
        turn: PlannedTurn,
    ) -> None:
        media = await self._media(turn)
        event: TurnSubmitted = submitted_for(
            turn,
            conversation.conversation_id,
            run_id=self.run_id,
            candidate=self.candidate,
            edge_id=self.target.edge_id,
            now_ms=now_ms(),
            media=media,
        )
        started = time.monotonic()
        await publisher.publish(event)
        try:
            completed = await outcomes.wait(event.turn_id, self.turn_timeout_s)
            result = result_of(self.run_id, turn, completed)
        except TimeoutError:
            result = timed_out(self.run_id, turn, event.turn_id, time.monotonic() - started)
            self.tally.timed_out += 1
        self.results.append(result)
        self.tally.done += 1
        self.tally.failed += bool(result.error_code)
        self.progress(self.tally.line())

    async def _media(self, turn: PlannedTurn) -> list[MediaRef]:
        """The turn's media in the run's blob store: an eval set's files, or the recorded
        blobs copied over (one that expired stays missing: the pipeline then answers
        `media_missing`, and the run counts it)."""
        refs: list[MediaRef] = list(turn.media)
        for ref in turn.media:
            if not ref.sha256 or self.target.source_blobs is None:
                continue
            data = await self.target.source_blobs.get(ref.sha256)
            if data is None:
                self.tally.media_missing += 1
                continue
            await self.target.blobs.put(ref.sha256, data, ttl_s=MEDIA_TTL_S)
        for item in turn.media_files:
            if self.media_root is None:
                raise FileNotFoundError(f"item {turn.item_id}: media without a set folder")
            data = (self.media_root / item.path).read_bytes()
            await self.target.blobs.put(item.sha256, data, ttl_s=MEDIA_TTL_S)
            refs.append(
                MediaRef(
                    kind=MediaKind(item.kind),
                    sha256=item.sha256,
                    size_bytes=len(data),
                    format=item.format,
                )
            )
        return refs


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
