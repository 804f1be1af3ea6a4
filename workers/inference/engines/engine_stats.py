"""What an engine reports about its own load, and folding per-step stats into it (pure).

Engines keep gauges (as of their latest scheduler step) and counters that only grow; a
reader takes the interval between two snapshots (`EngineSnapshot.since`), so several
readers, or a sample lost on the way to Kafka, never skew the counts. `EngineMeter` folds
vLLM's per-step scheduler and iteration stats into one snapshot; it takes plain numbers, so
it is tested without vLLM.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

COUNTERS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Gauges: `running` requests (the decode batch), `waiting` requests, `kv_cache_usage`
    (0..1). Counters (since the engine started, or over an interval after `since`): prompt
    tokens looked up in the prefix cache and found there, preemptions, prompt tokens
    prefilled (computed, not served from the cache), generated tokens; with speculative
    decoding, the drafts proposed, their tokens and the drafted tokens the model accepted."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0

    def since(self, earlier: EngineSnapshot) -> EngineSnapshot:
        """This snapshot's gauges with the counters' growth since `earlier`. A counter that
        went down means the engine restarted: its whole count belongs to the interval."""
        if any(getattr(self, c) < getattr(earlier, c) for c in COUNTERS):
            return self
        grown = {c: getattr(self, c) - getattr(earlier, c) for c in COUNTERS}
        return dataclasses.replace(self, **grown)

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Share of looked-up prompt tokens found in the prefix cache (None: no lookups)."""
        if self.prefix_cache_queries <= 0:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def spec_acceptance_rate(self) -> float | None:
        """Share of drafted tokens the model accepted (None: nothing was drafted)."""
        if self.spec_draft_tokens <= 0:
            return None
        return self.spec_accepted_tokens / self.spec_draft_tokens


class EngineMeter:
    """Folds an engine's per-step stats into an `EngineSnapshot`: scheduler stats set the
    gauges and add prefix-cache lookups (vLLM reports them per step), iteration stats add
    token and preemption counts, speculative decoding's stats its draft counts."""

    def __init__(self) -> None:
        self._gauges = (0, 0, 0.0)
        self._counts = dict.fromkeys(COUNTERS, 0)

    def scheduler_step(
        self,
        *,
        running: int,
        waiting: int,
        kv_cache_usage: float,
        prefix_queries: int = 0,
        prefix_hits: int = 0,
    ) -> None:
        usage = min(1.0, max(0.0, kv_cache_usage))  # float noise must not leave 0..1
        self._gauges = (max(0, running), max(0, waiting), usage)
        self._add("prefix_cache_queries", prefix_queries)
        self._add("prefix_cache_hits", prefix_hits)

    def iteration(self, *, prompt_tokens: int, generation_tokens: int, preemptions: int) -> None:
        self._add("prompt_tokens", prompt_tokens)
        self._add("generation_tokens", generation_tokens)
        self._add("preemptions", preemptions)

    def speculation(self, *, drafts: int, draft_tokens: int, accepted_tokens: int) -> None:
        self._add("spec_drafts", drafts)
        self._add("spec_draft_tokens", draft_tokens)
        self._add("spec_accepted_tokens", accepted_tokens)

    def _add(self, counter: str, amount: int) -> None:
        self._counts[counter] += max(0, amount)

    def snapshot(self) -> EngineSnapshot:
        running, waiting, usage = self._gauges
        return EngineSnapshot(running, waiting, usage, **self._counts)
