"""Picking the inference worker of a pool for one turn, from the workers' published states
(pure: states, the prompt's prefix chain and the clock come in; a `Pick` goes out).

`router` (the default) scores each fresh worker: the prefill it would save, minus its
load (turns held against its capacity, the engine's queue, KV cache in use, a large prefill
in progress). A saturated worker gets no credit for its prefix: a cache hit behind a long
queue is slower than a miss on an idle worker. The prefill saved is exact for a worker
that follows its engine's KV events (`held`: the prompt's leading blocks its engine holds
now, from `kv_lookup`), else approximate (the prompt's longest prefix the worker served
recently, `schemas.prefix`, which the engine may have evicted since). Turns sent since a
worker's last state are counted as its load too, so a burst between two state updates
does not all land on one worker.
A prompt no worker holds a useful prefix of (a new conversation) goes to the worker with the
smallest working set (the prompts of the conversations sent to it lately, which its cache
must keep for their next turns), then the least loaded, then at random: placing by
instantaneous load alone piles idle conversations onto one cache (measured: bench/routing.py).
`round_robin`, `random` and `key_hash` (Kafka's own partitioner on the conversation key:
what a plain consumer group gives) are kept as baselines for the benchmark.

A worker is reached through a partition of the pool's topic that its consumer group
assigned to it; after a rebalance the state says so within one update, and a turn sent to
a partition that changed hands meanwhile is still served, by its new owner.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from schemas.prefix import matched_chars
from schemas.worker_state import WorkerState, fresh


class Strategy(StrEnum):
    ROUTER = "router"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    KEY_HASH = "key_hash"


@dataclass(frozen=True, slots=True)
class Weights:
    prefix: float = 2.0  # score of a full saved prefill (`prefix_tokens` or more)
    prefix_tokens: int = 512  # a saved prefix this long earns the full prefix score
    load: float = 1.0  # per unit of turns held / capacity
    queue: float = 1.0  # per unit of (engine waiting + worker queue) / capacity
    kv: float = 0.5  # per unit of KV cache in use
    prefill: float = 0.3  # a prefill of `prefill_tokens` or more in progress
    prefill_tokens: int = 2048
    saturated_kv: float = 0.9  # at or above: saturated
    min_prefix_tokens: int = 64  # a shorter match (a shared system prompt) is no affinity
    working_set_s: float = 30.0  # a conversation sent lately still needs its cache


@dataclass(frozen=True, slots=True)
class Pick:
    worker_id: str  # "" when no worker state was usable (key hash)
    partition: int | None  # None: let Kafka's partitioner place it by key
    strategy: str
    reason: str
    prefix_chars: int = 0  # of the prompt the chosen worker served recently
    score: float = 0.0
    prefix_tokens: int = 0  # of the prompt the chosen worker's engine holds (KV events)


CHARS_PER_TOKEN = 4.0  # a rough English average: only the size of the saved prefill matters


@dataclass(frozen=True, slots=True)
class _Scored:
    score: float
    load: float
    state: WorkerState
    chars: int  # approximate match (served prefixes)
    exact: int | None  # tokens its engine holds, when followed
    tokens: float  # the match scored: exact when known
    saturated: bool

    def pick(self, strategy: str, reason: str) -> Pick:
        return Pick(
            self.state.worker_id,
            None,
            strategy,
            reason,
            self.chars,
            round(self.score, 4),
            self.exact or 0,
        )


class EndpointPicker:
    def __init__(
        self,
        strategy: Strategy | str = Strategy.ROUTER,
        *,
        ttl_ms: float = 2000.0,
        weights: Weights | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.strategy = Strategy(strategy)
        self.ttl_ms = ttl_ms
        self.weights = weights or Weights()
        self.rng = rng or random.Random()
        self._turn = 0  # round robin position
        self._sent: dict[str, list[float]] = {}  # worker -> when turns were sent to it
        # worker -> conversation key -> (when, prompt characters) of its last turn sent there
        self._placed: dict[str, dict[bytes, tuple[float, int]]] = {}

    def pick(
        self,
        states: Sequence[WorkerState],
        *,
        key: bytes,
        chain: Sequence[int] = (),
        lengths: Sequence[int] = (),
        now_ms: float,
        held: Mapping[str, int] | None = None,
    ) -> Pick:
        """`held`: worker id -> prompt tokens its engine's KV cache holds, for the workers
        whose engine's cache is followed (the others are scored on `chain`)."""
        usable = sorted(fresh(list(states), now_ms, self.ttl_ms), key=lambda s: s.worker_id)
        if self.strategy == Strategy.KEY_HASH or not usable:
            why = "key hash" if usable else "no fresh worker state: key hash"
            return Pick("", None, str(self.strategy), why)
        if self.strategy == Strategy.ROUND_ROBIN:
            chosen = usable[self._turn % len(usable)]
            self._turn += 1
            pick = Pick(chosen.worker_id, None, "round_robin", "round robin")
        elif self.strategy == Strategy.RANDOM:
            chosen = self.rng.choice(usable)
            pick = Pick(chosen.worker_id, None, "random", "random")
        else:
            chosen, pick = self._best(usable, chain, lengths, now_ms, held or {})
        self._note_sent(chosen.worker_id, now_ms)
        self._note_placed(chosen.worker_id, key, lengths[-1] if lengths else 0, now_ms)
        partition = chosen.partitions[zlib.crc32(key) % len(chosen.partitions)]
        return dataclasses.replace(pick, partition=partition)

    def _best(
        self,
        usable: list[WorkerState],
        chain: Sequence[int],
        lengths: Sequence[int],
        now_ms: float,
        held: Mapping[str, int],
    ) -> tuple[WorkerState, Pick]:
        scored = []
        for state in usable:
            chars = matched_chars(chain, lengths, state.prefixes) if chain else 0
            exact = held.get(state.worker_id)
            tokens = float(exact) if exact is not None else chars / CHARS_PER_TOKEN
            score, load, saturated = self.score(state, self._pending(state), tokens)
            scored.append(_Scored(score, load, state, chars, exact, tokens, saturated))
        open_ = [c for c in scored if not c.saturated]
        if open_ and all(c.tokens < self.weights.min_prefix_tokens for c in scored):
            # nobody holds it: spread the caches
            sets = {c.state.worker_id: self._working_set(c.state.worker_id, now_ms) for c in open_}
            best = min(
                open_,
                key=lambda c: (sets[c.state.worker_id], round(c.load, 2), self.rng.random()),
            )
            reason = f"new prefix: smallest working set ({sets[best.state.worker_id]} chars)"
            return best.state, best.pick("router", reason)
        # ties: the less loaded, then at random
        best = max(scored, key=lambda c: (c.score, -c.load, self.rng.random()))
        if best.tokens and not best.saturated:
            held_what = (
                f"{best.exact} tokens held (KV events)"
                if best.exact is not None
                else f"prefix {best.chars} chars served"
            )
            reason = f"{held_what}, load {best.load:.2f}"
        elif best.saturated:
            reason = f"every choice saturated: least bad, load {best.load:.2f}"
        else:
            reason = f"least loaded, load {best.load:.2f}"
        return best.state, best.pick("router", reason)

    def score(
        self, state: WorkerState, pending: int, matched_tokens: float
    ) -> tuple[float, float, bool]:
        """(score, load, saturated) of sending one more turn to `state`'s worker, whose
        cache saves `matched_tokens` of the prompt's prefill."""
        w = self.weights
        capacity = max(1, state.capacity)
        held = state.in_flight + pending
        load = held / capacity
        queue = (state.waiting + state.queue_depth) / capacity
        saturated = state.kv_cache_usage >= w.saturated_kv or held >= capacity
        saved = min(1.0, matched_tokens / w.prefix_tokens)
        prefix = 0.0 if saturated else w.prefix * saved
        prefill = w.prefill * min(1.0, state.prefilling_tokens / w.prefill_tokens)
        score = prefix - w.load * load - w.queue * queue - w.kv * state.kv_cache_usage - prefill
        return score, load, saturated

    def _pending(self, state: WorkerState) -> int:
        """Turns sent to the worker after its state was taken (not in its counts yet)."""
        return sum(1 for at in self._sent.get(state.worker_id, ()) if at > state.at_ms)

    def _working_set(self, worker_id: str, now_ms: float) -> int:
        """Prompt characters of the conversations sent to the worker lately."""
        horizon = now_ms - self.weights.working_set_s * 1000
        placed = self._placed.get(worker_id, {})
        for key in [k for k, (at, _) in placed.items() if at < horizon]:
            del placed[key]
        return sum(chars for _, chars in placed.values())

    def _note_placed(self, worker_id: str, key: bytes, chars: int, now_ms: float) -> None:
        for other, placed in self._placed.items():  # a conversation lives in one cache
            if other != worker_id:
                placed.pop(key, None)
        self._placed.setdefault(worker_id, {})[key] = (now_ms, chars)

    def _note_sent(self, worker_id: str, now_ms: float) -> None:
        recent = [at for at in self._sent.get(worker_id, ()) if now_ms - at <= self.ttl_ms]
        recent.append(now_ms)
        self._sent[worker_id] = recent
