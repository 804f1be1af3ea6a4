"""The semantic cache as the assembly job uses it: look a context-free question up before it
goes to an engine, and remember the answer when it ends well.

A question is looked up only when its answer can depend on nothing but its words (no
history, media, retrieved passages or profile in the prompt, not flagged by the input
screen: `cache_rules.skip_reason`); an exact repeat is found without embedding. Entries are
keyed to the persona (`model` = its digest), so changing the system prompt never serves an
answer written under the old one. Only answers that ended normally are stored (stop, no
error, not cut by the safety check). The cache is an optimisation: when Redis or the
embedder fails the turn simply goes to an engine, and the failure is logged once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from redis.asyncio import Redis

from schemas.events import FinishReason, TurnCompleted, TurnEnriched
from stream_jobs.assembly.cache.rules import skip_reason
from stream_jobs.assembly.cache.semantic_cache import (
    CacheError,
    CacheHit,
    MiniLMEmbedder,
    SemanticCache,
)

log = logging.getLogger("turnstream.assembly.cache")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    threshold: float = 0.96
    ttl_s: float = 86400.0
    max_entries: int = 10_000
    max_query_chars: int = 300


class AnswerCache:
    def __init__(
        self,
        redis: Callable[[], Redis],
        prefix: str,
        embed: Callable[[list[str]], np.ndarray],
        *,
        persona: str,
        config: CacheConfig,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._embedder = MiniLMEmbedder(embed)
        self._cache: SemanticCache | None = None
        self.config = config
        self.model = hashlib.sha256(persona.encode()).hexdigest()[:12]
        self._failing = False

    @property
    def cache(self) -> SemanticCache:
        if self._cache is None:  # on the job's loop, with its Redis client
            self._cache = SemanticCache(
                self._redis(),
                self._prefix,
                threshold=self.config.threshold,
                ttl_s=self.config.ttl_s,
                max_entries=self.config.max_entries,
            )
        return self._cache

    def eligible(
        self, turn: TurnEnriched, *, history_messages: int, passages: int, profile: bool
    ) -> bool:
        screening = turn.screening
        return (
            skip_reason(
                turn.text,
                history_messages=history_messages,
                media_parts=len(turn.images) + len(turn.submitted.media),
                retrieved_passages=passages,
                has_profile=profile,
                flagged=bool(screening and screening.labels),
                max_chars=self.config.max_query_chars,
            )
            is None
        )

    async def lookup(self, tenant: str, query: str) -> CacheHit | None:
        try:
            hit = await self.cache.lookup_exact(tenant, query, model=self.model)
            if hit is None:
                vector = await asyncio.to_thread(self._embedder.embed, query)
                hit = await self.cache.lookup(tenant, query, vector, model=self.model)
        except (CacheError, RuntimeError, ValueError) as err:
            self._failed("lookup", err)
            return None
        self._failing = False
        return hit

    async def remember(self, tenant: str, query: str, completed: TurnCompleted) -> None:
        if completed.finish_reason != FinishReason.STOP or completed.error is not None:
            return
        if not completed.text.strip():
            return
        try:
            vector = await asyncio.to_thread(self._embedder.embed, query)
            await self.cache.store(tenant, query, vector, completed.text, self.model)
        except (CacheError, RuntimeError, ValueError) as err:
            self._failed("store", err)

    def _failed(self, what: str, err: Exception) -> None:
        if not self._failing:
            self._failing = True
            log.warning("semantic cache %s failed (%r): turns go to the engines", what, err)
