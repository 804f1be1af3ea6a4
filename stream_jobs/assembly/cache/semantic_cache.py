"""Semantic answer cache: a context-free question asked again (or paraphrased) gets the answer
given before, without a model call.

This module holds the I/O parts: `SemanticCache` (async, Redis) and `MiniLMEmbedder`
(blocking: the caller runs `embed` in a thread). The pure parts live apart: the text rules in
`cache_rules`, the cosine selection and in-memory rows in `cache_vectors`, the Lua scripts in
`cache_scripts`.

Redis layout, per tenant, under ``{prefix}:semcache:{tenant}``:
- ``:e:{id}`` hash {q normalised query, v float32 vector, a answer, m model, t created ms,
  h hits, x digest}, with the entry's TTL;
- ``:x:{digest}`` the id of the entry for one exact normalised query (same TTL): a repeat hits
  without the embedding threshold, and without an embedding at all (`lookup_exact`);
- ``:idx`` sorted set id -> expiry (ms): the live entries, for a full load, the count and the
  bound; expired members are pruned on store;
- ``:log`` a stream of changes (add id+expiry / del ids / clear), numbered by ``:seq``: a
  process keeps each tenant's matrix in memory and on every lookup reads the log past the
  point it holds (usually nothing, in the same round trip as the exact check), fetching only
  new vectors. A gap in the numbers (trimmed log, expired and restarted) means a full reload;
- ``:stats`` hash of hit/miss/store/eviction counters, shared by every process.
Writes are Lua scripts (atomic: entry, exact key, index, log and bound move together). A hit
is confirmed in Redis (one script: the entry still exists, then its counters): an entry
invalidated elsewhere is never served, even by a process that has not read the log yet. The
tenant's own keys live as long as its longest-lived entry. Key names inside the scripts are
built from the tenant base, so this is single-node Redis, not Cluster.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.asyncio import Redis
from redis.exceptions import RedisError

from stream_jobs.assembly.cache.rules import normalise_query, query_digest
from stream_jobs.assembly.cache.scripts import HIT_SCRIPT, REMOVE_SCRIPT, STORE_SCRIPT
from stream_jobs.assembly.cache.vectors import DIM, VectorRows, best_matches, unit
from stream_jobs.errors import StreamJobError

DEFAULT_THRESHOLD = 0.96
DEFAULT_TTL_S = 24 * 3600
DEFAULT_MAX_ENTRIES = 10_000


class CacheError(StreamJobError):
    """Redis failed; the caller treats the turn as a miss (or skips the store)."""


# ---- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CacheHit:
    entry_id: str
    answer: str
    model: str
    query: str  # the stored normalised query
    score: float  # cosine (1.0 for an exact repeat)
    exact: bool
    created_at_ms: int
    hits: int  # this entry's hits, this one included


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    exact_hits: int
    misses: int
    stores: int
    evictions: int
    entries: int

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


# ---- Redis -----------------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _stream_id(value: bytes | str) -> tuple[int, int]:
    ms, _, seq = _text(value).partition("-")
    return int(ms), int(seq or 0)


@dataclass(eq=False)
class _Tenant:
    """A tenant's rows and the point of its change log they reflect."""

    rows: VectorRows
    seq: int = 0  # the log's `n` of the last change applied
    last_id: str = "0-0"  # its stream id
    loaded: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SemanticCache:
    """The shared cache of one namespace (`prefix`), every tenant apart. Every Redis failure
    is raised as CacheError. Lookups and stores take the raw query; it is normalised here."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "ts",
        *,
        threshold: float = DEFAULT_THRESHOLD,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        dim: int = DIM,
        guard: bool = True,
        log_length: int = 1000,
        max_tenants_in_memory: int = 256,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if ttl_s <= 0 or max_entries <= 0 or log_length <= 0:
            raise ValueError("ttl_s, max_entries and log_length must be positive")
        self._redis = redis
        self._prefix = prefix
        self.threshold = threshold
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.dim = dim
        self.guard = guard
        self.log_length = log_length
        self._max_tenants = max_tenants_in_memory
        self._clock = clock
        self._tenants: OrderedDict[str, _Tenant] = OrderedDict()
        self._store = redis.register_script(STORE_SCRIPT)
        self._remove = redis.register_script(REMOVE_SCRIPT)
        self._hit = redis.register_script(HIT_SCRIPT)

    # ---- keys ----
    def base(self, tenant: str) -> str:
        return f"{self._prefix}:semcache:{tenant}"

    def _entry(self, tenant: str, entry_id: str) -> str:
        return f"{self.base(tenant)}:e:{entry_id}"

    def _exact(self, tenant: str, digest: str) -> str:
        return f"{self.base(tenant)}:x:{digest}"

    def _common_args(self, tenant: str, ttl_ms: int) -> list[Any]:
        base = self.base(tenant)
        return [ttl_ms, f"{base}:e:", f"{base}:x:", self.log_length]

    # ---- writes ----
    async def store(
        self,
        tenant: str,
        query: str,
        embedding: Sequence[float] | np.ndarray,
        answer: str,
        model: str,
        *,
        ttl_s: float | None = None,
    ) -> str:
        """Cache `answer` for `query`; returns the entry id. A stored entry for the same
        normalised query is replaced; past `max_entries` the ones closest to expiry (under
        one TTL: the oldest) are evicted."""
        normalised = normalise_query(query)
        if not normalised:
            raise ValueError("nothing to cache: the query is empty once normalised")
        ttl_ms = int((self.ttl_s if ttl_s is None else ttl_s) * 1000)
        if ttl_ms <= 0:
            raise ValueError("ttl_s must be positive")
        vector = unit(embedding, self.dim)
        entry_id = uuid.uuid4().hex
        digest = query_digest(normalised)
        base = self.base(tenant)
        keys = [
            self._entry(tenant, entry_id),
            self._exact(tenant, digest),
            f"{base}:idx",
            f"{base}:log",
            f"{base}:seq",
            f"{base}:stats",
        ]
        args = [
            *self._common_args(tenant, ttl_ms),
            entry_id,
            normalised,
            vector.astype("<f4").tobytes(),
            answer,
            model,
            repr(self._clock() * 1000),  # sub-ms: ties would evict in random order
            self.max_entries,
            digest,
        ]
        try:
            await self._store(keys=keys, args=args)
        except RedisError as err:
            raise CacheError(f"semantic cache store failed: {err!r}") from err
        return entry_id

    async def _remove_entries(self, tenant: str, entry_id: str) -> int:
        base = self.base(tenant)
        keys = [f"{base}:idx", f"{base}:log", f"{base}:seq"]
        args = [*self._common_args(tenant, int(self.ttl_s * 1000)), entry_id]
        try:
            return int(await self._remove(keys=keys, args=args))
        except RedisError as err:
            raise CacheError(f"semantic cache removal failed: {err!r}") from err

    async def invalidate(self, tenant: str, entry_id: str) -> bool:
        """Remove one entry (every process stops serving it at once)."""
        if not entry_id:
            raise ValueError("entry_id is empty")
        return await self._remove_entries(tenant, entry_id) > 0

    async def clear(self, tenant: str) -> int:
        """Remove all of a tenant's entries (its counters stay); returns how many."""
        return await self._remove_entries(tenant, "")

    # ---- reads ----
    async def lookup_exact(self, tenant: str, query: str, *, model: str = "") -> CacheHit | None:
        """A hit for a repeat of a stored normalised query, before any embedding is computed.
        Counts hits only: on None, call `lookup`, which counts the outcome."""
        normalised = normalise_query(query)
        if not normalised:
            return None
        try:
            entry_id = await self._redis.get(self._exact(tenant, query_digest(normalised)))
        except RedisError as err:
            raise CacheError(f"semantic cache lookup failed: {err!r}") from err
        if entry_id is None:
            return None
        return await self._confirm(tenant, _text(entry_id), 1.0, model, exact=True)

    async def lookup(
        self,
        tenant: str,
        query: str,
        embedding: Sequence[float] | np.ndarray,
        *,
        model: str = "",
    ) -> CacheHit | None:
        """The best live entry: the exact repeat of `query`, else the closest with cosine at
        least the threshold that `conflicting` does not reject; `model` ('' for any) must
        match. Counts a hit or a miss for the tenant."""
        normalised = normalise_query(query)
        vector = unit(embedding, self.dim)
        state = self._state(tenant)
        loaded, after = state.loaded, state.last_id
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.get(self._exact(tenant, query_digest(normalised)))
                if loaded:
                    pipe.xrange(f"{self.base(tenant)}:log", f"({after}", "+", self.log_length)
                replies = await pipe.execute()
        except RedisError as err:
            raise CacheError(f"semantic cache lookup failed: {err!r}") from err
        if replies[0] is not None:
            hit = await self._confirm(tenant, _text(replies[0]), 1.0, model, exact=True)
            if hit is not None:
                return hit
        async with state.lock:
            await self._catch_up(tenant, state, replies[1] if loaded else None)
        rows = state.rows
        candidates = best_matches(
            rows.matrix[: len(rows.ids)],
            vector,
            rows.queries,
            normalised,
            self.threshold,
            usable=rows.usable(self._clock() * 1000, model),
            guard=self.guard,
        )
        # ids resolved now: rows may be compacted by another lookup while this one awaits
        for entry_id, score in [(rows.ids[row], score) for row, score in candidates]:
            hit = await self._confirm(tenant, entry_id, score, model, exact=False)
            if hit is not None:
                return hit
        try:
            await self._redis.hincrby(f"{self.base(tenant)}:stats", "misses", 1)
        except RedisError as err:
            raise CacheError(f"semantic cache lookup failed: {err!r}") from err
        return None

    async def _confirm(
        self, tenant: str, entry_id: str, score: float, model: str, *, exact: bool
    ) -> CacheHit | None:
        """The entry if it still exists in Redis (and is `model`'s), its hit counted."""
        keys = [self._entry(tenant, entry_id), f"{self.base(tenant)}:stats"]
        try:
            row = await self._hit(keys=keys, args=[model, "1" if exact else "0"])
        except RedisError as err:
            raise CacheError(f"semantic cache lookup failed: {err!r}") from err
        if row is None:
            return None
        answer, stored_model, created, stored_query, hits = row
        return CacheHit(
            entry_id=entry_id,
            answer=_text(answer),
            model=_text(stored_model),
            query=_text(stored_query),
            score=score,
            exact=exact,
            created_at_ms=int(float(created or 0)),
            hits=int(hits),
        )

    # ---- the in-memory copy ----
    def _state(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(VectorRows(self.dim))
            while len(self._tenants) > self._max_tenants:
                self._tenants.popitem(last=False)
        self._tenants.move_to_end(tenant)
        return state

    async def _catch_up(self, tenant: str, state: _Tenant, log: list | None) -> None:
        """Apply the change-log entries read after `state.last_id` (None: never loaded). A
        gap (the log trimmed past us, or restarted after expiring) or a long backlog means a
        full reload instead."""
        if log is None:
            if not state.loaded:
                await self._reload(tenant, state)
            return  # loaded meanwhile by a concurrent lookup
        last = _stream_id(state.last_id)
        changes = [(sid, fields) for sid, fields in log if _stream_id(sid) > last]
        if not changes:
            return
        numbers = [int(fields[b"n"]) for _, fields in changes]
        if len(log) >= self.log_length or numbers != list(
            range(state.seq + 1, state.seq + 1 + len(changes))
        ):
            await self._reload(tenant, state)
            return
        clear = False
        removed: set[str] = set()
        added: dict[str, float] = {}
        for _, fields in changes:
            if fields.get(b"clear"):
                clear, removed, added = True, set(), {}  # a clear drops what came before
            for entry_id in filter(None, _text(fields.get(b"del")).split(",")):
                removed.add(entry_id)
                added.pop(entry_id, None)
            if fields.get(b"add"):
                added[_text(fields[b"add"])] = float(fields[b"exp"])
        fetched = await self._fetch(tenant, list(added))
        if clear:
            state.rows = VectorRows(self.dim)
        for entry_id in removed:
            state.rows.remove(entry_id)
        for entry_id, expiry_ms in added.items():
            if entry_id in fetched:
                query, model, vector = fetched[entry_id]
                state.rows.add(entry_id, query, model, expiry_ms, vector)
        state.seq, state.last_id = numbers[-1], _text(changes[-1][0])

    async def _reload(self, tenant: str, state: _Tenant) -> None:
        """Rebuild from the index; only the vectors not held already are fetched."""
        base = self.base(tenant)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.get(f"{base}:seq")
                pipe.xrevrange(f"{base}:log", "+", "-", 1)
                pipe.zrangebyscore(f"{base}:idx", self._clock() * 1000, "+inf", withscores=True)
                seq, head, members = await pipe.execute()
        except RedisError as err:
            raise CacheError(f"semantic cache reload failed: {err!r}") from err
        index = {_text(member): float(expiry) for member, expiry in members}
        old = state.rows
        fetched = await self._fetch(tenant, [i for i in index if old.vector(i) is None])
        rows = VectorRows(self.dim, capacity=max(64, 2 * len(index)))
        for entry_id, expiry_ms in index.items():
            held = old.vector(entry_id)
            if held is not None:
                row = old.row_of[entry_id]
                rows.add(entry_id, old.queries[row], old.models[row], expiry_ms, held)
            elif entry_id in fetched:
                query, model, vector = fetched[entry_id]
                rows.add(entry_id, query, model, expiry_ms, vector)
        state.rows, state.seq, state.loaded = rows, int(seq or 0), True
        state.last_id = _text(head[0][0]) if head else "0-0"

    async def _fetch(self, tenant: str, ids: list[str]) -> dict[str, tuple[str, str, np.ndarray]]:
        """(query, model, vector) of the entries that still exist, by id."""
        if not ids:
            return {}
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.hmget(self._entry(tenant, entry_id), "q", "m", "v")
                replies = await pipe.execute()
        except RedisError as err:
            raise CacheError(f"semantic cache reload failed: {err!r}") from err
        found = {}
        for entry_id, (query, model, raw) in zip(ids, replies, strict=True):
            if raw is not None and len(raw) == self.dim * 4:  # else gone since listed
                found[entry_id] = (_text(query), _text(model), np.frombuffer(raw, "<f4"))
        return found

    async def stats(self, tenant: str) -> CacheStats:
        """The tenant's counters (shared by every process) and its live entry count."""
        base = self.base(tenant)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(f"{base}:stats")
                pipe.zcount(f"{base}:idx", self._clock() * 1000, "+inf")
                counters, entries = await pipe.execute()
        except RedisError as err:
            raise CacheError(f"semantic cache stats failed: {err!r}") from err
        values = {_text(k): int(v) for k, v in counters.items()}
        return CacheStats(
            hits=values.get("hits", 0),
            exact_hits=values.get("exact_hits", 0),
            misses=values.get("misses", 0),
            stores=values.get("stores", 0),
            evictions=values.get("evictions", 0),
            entries=int(entries),
        )

    async def drop_counters(self, tenant: str) -> None:
        """Reset the tenant's counters (a benchmark run starts from zero)."""
        try:
            await self._redis.delete(f"{self.base(tenant)}:stats")
        except RedisError as err:
            raise CacheError(f"semantic cache stats failed: {err!r}") from err


# ---- the embedder ----------------------------------------------------------------------------


class MiniLMEmbedder:
    """Embeddings of normalised queries with the bundled all-MiniLM-L6-v2, loaded the way
    retrieval loads it. Pass `embed` (e.g. the job's `EmbeddingRetriever.embed`, or the
    router's `minilm_embedder(...)`) to share one loaded model. Blocking, ~7-40 ms a query on
    a CPU core: call `embed` through `asyncio.to_thread`."""

    dim = DIM

    def __init__(self, embed: Callable[[list[str]], np.ndarray] | None = None) -> None:
        if embed is None:
            from stream_jobs.assembly.retrieval import EmbeddingRetriever

            embed = EmbeddingRetriever([]).embed
        self._embed = embed

    def embed_many(self, queries: Sequence[str]) -> np.ndarray:
        """(len(queries), 384) float32 unit vectors of the normalised queries."""
        vectors = self._embed([normalise_query(q) for q in queries])
        return np.asarray(vectors, np.float32).reshape(len(queries), self.dim)

    def embed(self, query: str) -> np.ndarray:
        return self.embed_many([query])[0]
