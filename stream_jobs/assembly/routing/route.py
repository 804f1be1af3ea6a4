"""Routing one assembled turn: the semantic router names a pool (by what the turn asks),
then the endpoint picker names a worker of that pool (by the workers' state).

The semantic decision comes first because it also decides whether retrieval runs. The
pool it names must be configured (TURNSTREAM_POOLS); otherwise the turn goes to the default
pool and the reason says so. A pool with no live worker on the board (none started, all
crashed, or none yet at startup) hands its turns to the default pool rather than leaving
them unanswered. Without an intent router every turn goes to the default pool with
retrieval on (the behaviour before routing existed).

Pictures: the `image_generation` intent names the `imagegen` pool, which is no inference
pool: its turns go to `images.requested` for the image workers (workers/imagegen). They have
no fallback pool (a text model cannot draw): while no image worker is live on its board the
turn is answered `image_generation_unavailable` instead (`image_workers_live`). Without a
board (TURNSTREAM_WORKER_STATE_INTERVAL_MS=0) liveness is unknown and the topic keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from schemas.events import Message, Route
from schemas.prefix import message_chain, prefix_lengths
from schemas.worker_state import WorkerState, fresh
from stream_jobs.assembly.routing.endpoint_picker import EndpointPicker, Strategy
from stream_jobs.assembly.routing.kv_lookup import KvLookup
from stream_jobs.assembly.routing.semantic_router import RouteDecision as Intent
from stream_jobs.assembly.routing.worker_board import WorkerBoard

IMAGE_POOL = "imagegen"  # the image workers' board and route (not an inference pool)


class IntentRouter(Protocol):
    def decide(
        self,
        text: str,
        *,
        has_images: bool = False,
        history_turns: int = 0,
        previous: Intent | None = None,
        classify: bool = True,
    ) -> Intent:
        """Blocking (it may embed the text): callers run it in a thread."""


class Routing:
    def __init__(
        self,
        *,
        pools: tuple[str, ...],
        intents: IntentRouter | None,
        board: WorkerBoard | None,
        picker: EndpointPicker,
        clock_ms: Callable[[], float],
        kv_lookup: KvLookup | None = None,
    ) -> None:
        self.pools = pools
        self.intents = intents
        self.board = board
        self.picker = picker
        self.clock_ms = clock_ms
        self.kv_lookup = kv_lookup

    @property
    def default_pool(self) -> str:
        return self.pools[0]

    def intent(
        self,
        text: str,
        *,
        has_images: bool,
        history_turns: int,
        forced_pool: str = "",
        previous: Intent | None = None,
        classify: bool = True,
    ) -> Intent:
        """The semantic decision (blocking), mapped onto a configured pool. `forced_pool`:
        admission degraded the turn to that pool under overload; it wins. `previous`: the
        conversation's last decision (a short follow-up stays where it was)."""
        if self.intents is None:
            decided = Intent(self.default_pool, "", True, "no semantic router", 1.0)
        else:
            decided = self.intents.decide(
                text,
                has_images=has_images,
                history_turns=history_turns,
                previous=previous,
                classify=classify,
            )
        if decided.pool == IMAGE_POOL:
            return decided  # not an inference pool: admission's degrading does not apply
        if forced_pool and forced_pool in self.pools:
            reason = f"{decided.reason}; degraded to {forced_pool!r} by admission"
            return Intent(forced_pool, decided.intent, decided.retrieval, reason, decided.score)
        if decided.pool in self.pools:
            return decided
        reason = f"{decided.reason}; pool {decided.pool!r} not configured"
        return Intent(self.default_pool, decided.intent, decided.retrieval, reason, decided.score)

    async def live_pools(self) -> int:
        """How many pools have a live worker (without a board: all of them, as far as
        anyone can tell)."""
        if self.board is None:
            return len(self.pools)
        return sum([self._live(await self.board.states(pool)) for pool in self.pools])

    async def image_workers_live(self) -> bool:
        """Whether a picture request can be served: some image worker is live on its board
        (without a board, as far as anyone can tell)."""
        return self.board is None or self._live(await self.board.states(IMAGE_POOL))

    async def place(
        self, intent: Intent, messages: Sequence[Message], key: bytes, salt: str = ""
    ) -> Route:
        """Pick the worker of the intent's pool for a prompt (an image request: any image
        worker, by Kafka's key hashing on `images.requested`). `salt`: the prompt's cache
        scope (`schemas.prefix.cache_salt`), as its worker will remember it and its engine
        salts its first block. Workers that follow their engine's KV cache are asked which of
        the prompt's blocks they hold (`kv_lookup`)."""
        if intent.pool == IMAGE_POOL:
            return Route(
                pool=IMAGE_POOL,
                intent=intent.intent,
                reason=intent.reason,
                retrieval=False,
                strategy="key_hash",
            )
        states = await self.board.states(intent.pool) if self.board is not None else []
        if self.board is not None and intent.pool != self.default_pool and not self._live(states):
            # the default pool is the one that is always served (even while its workers
            # are still starting, its topic keeps the turn for them)
            reason = f"{intent.reason}; pool {intent.pool!r} has no live worker"
            intent = Intent(
                self.default_pool, intent.intent, intent.retrieval, reason, intent.score
            )
            states = await self.board.states(self.default_pool)
        held = None
        if self.kv_lookup is not None and self.picker.strategy == Strategy.ROUTER:
            usable = fresh(states, self.clock_ms(), self.picker.ttl_ms)
            held = await self.kv_lookup.held_tokens(intent.pool, usable, messages, salt)
        pick = self.picker.pick(
            states,
            key=key,
            chain=message_chain(messages, salt),
            lengths=prefix_lengths(messages),
            now_ms=self.clock_ms(),
            held=held,
        )
        return Route(
            pool=intent.pool,
            intent=intent.intent,
            reason=intent.reason,
            retrieval=intent.retrieval,
            strategy=pick.strategy,
            worker_id=pick.worker_id,
            partition=-1 if pick.partition is None else pick.partition,
            pick_reason=pick.reason,
            prefix_chars=pick.prefix_chars,
            prefix_tokens=pick.prefix_tokens,
            score=pick.score,
        )

    def _live(self, states: list[WorkerState]) -> bool:
        return bool(fresh(states, self.clock_ms(), self.picker.ttl_ms))
