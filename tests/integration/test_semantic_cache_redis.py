"""The semantic cache against the real local Redis and the bundled MiniLM: paraphrases hit,
near-misses do not, tenants are apart, entries expire, and a second instance (another
process's view) sees invalidations, clears, evictions and the shared counters."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from runtime.redis import redis_client
from schemas.channels import RedisNames
from stream_jobs.assembly.cache.semantic_cache import CacheError, MiniLMEmbedder, SemanticCache

pytestmark = pytest.mark.integration

FRANCE = "What is the capital of France?"
PARIS = "The capital of France is Paris."


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
async def env(services, session_namespace):
    """Two clients and a fresh prefix (two processes sharing one Redis), cleaned up after."""
    prefix = RedisNames.for_namespace(f"{session_namespace}-semcache-{uuid.uuid4().hex[:6]}")
    clients = [redis_client(services.redis_url), redis_client(services.redis_url)]
    try:
        yield prefix.prefix, clients
    finally:
        keys = [key async for key in clients[0].scan_iter(match=f"{prefix.prefix}:*")]
        if keys:
            await clients[0].delete(*keys)
        for client in clients:
            await client.aclose()


def _cache(env, which: int = 0, **options) -> SemanticCache:
    prefix, clients = env
    return SemanticCache(clients[which], prefix, **options)


async def _keys(env) -> list[str]:
    prefix, clients = env
    return sorted([k.decode() async for k in clients[0].scan_iter(match=f"{prefix}:*")])


async def test_paraphrase_hits_exact_repeat_hits_near_misses_miss(env, embedder):
    cache = _cache(env)
    entry_id = await cache.store("t1", FRANCE, embedder.embed(FRANCE), PARIS, "smol")

    probe = "What's the capital of France?"
    hit = await cache.lookup("t1", probe, embedder.embed(probe))
    assert hit is not None and hit.entry_id == entry_id and not hit.exact
    assert hit.answer == PARIS and hit.model == "smol" and hit.score >= 0.96
    assert hit.query == "what is the capital of france" and hit.hits == 1
    assert abs(hit.created_at_ms - time.time() * 1000) < 60_000

    repeat = "  WHAT is the capital of france ?! "
    exact = await cache.lookup_exact("t1", repeat)
    assert exact is not None and exact.exact and exact.score == 1.0 and exact.hits == 2
    # an exact repeat hits even with an embedding that is nowhere near (no threshold involved)
    far = embedder.embed("How do I bake bread?")
    assert (await cache.lookup("t1", repeat, far)).entry_id == entry_id

    for near in ("What is the capital of Germany?", "What is the capital of Spain?"):
        assert await cache.lookup("t1", near, embedder.embed(near)) is None
    assert await cache.lookup_exact("t1", "What is the capital of Germany?") is None

    km = "Convert 5 km to miles"
    await cache.store("t1", km, embedder.embed(km), "3.11 miles", "smol")
    swapped = "Convert 5 miles to km"  # cosine ~0.99 with the stored one: the guard refuses
    assert await cache.lookup("t1", swapped, embedder.embed(swapped)) is None
    assert await cache.lookup("t1", "convert 5 km into miles", embedder.embed(km)) is not None

    assert await cache.lookup("t1", probe, embedder.embed(probe), model="other") is None
    assert await cache.lookup("t1", probe, embedder.embed(probe), model="smol") is not None


async def test_tenants_are_apart(env, embedder):
    cache = _cache(env)
    vector = embedder.embed(FRANCE)
    await cache.store("a", FRANCE, vector, PARIS, "m")
    assert await cache.lookup("b", FRANCE, vector) is None
    assert await cache.lookup_exact("b", FRANCE) is None
    await cache.store("b", FRANCE, vector, "Paris (b)", "m")
    assert (await cache.lookup("a", FRANCE, vector)).answer == PARIS
    assert (await cache.lookup("b", FRANCE, vector)).answer == "Paris (b)"
    await cache.clear("a")
    assert await cache.lookup("a", FRANCE, vector) is None
    assert (await cache.lookup("b", FRANCE, vector)).answer == "Paris (b)"
    stats_a, stats_b = await cache.stats("a"), await cache.stats("b")
    assert (stats_a.hits, stats_a.misses, stats_a.entries) == (1, 1, 0)
    assert (stats_b.hits, stats_b.misses, stats_b.entries) == (2, 1, 1)


async def test_entries_expire_in_redis(env, embedder):
    cache = _cache(env, ttl_s=1.5)
    vector, hamlet, sky = embedder.embed_many([FRANCE, "Who wrote Hamlet?", "Why is the sky blue?"])
    await cache.store("t", FRANCE, vector, PARIS, "m")
    await cache.store("t", "Who wrote Hamlet?", hamlet, "W.S.", "m", ttl_s=30)
    assert await cache.lookup("t", FRANCE, vector) is not None
    assert (await cache.stats("t")).entries == 2
    await asyncio.sleep(1.8)
    assert await cache.lookup("t", "what's the capital of france", vector) is None
    assert await cache.lookup_exact("t", FRANCE) is None
    assert await cache.lookup_exact("t", "who wrote hamlet") is not None  # its own, longer TTL
    assert (await cache.stats("t")).entries == 1
    keys = await _keys(env)
    assert sum(":e:" in k for k in keys) == 1 and sum(":x:" in k for k in keys) == 1
    await cache.store("t", "Why is the sky blue?", sky, "Rayleigh", "m")
    _, clients = env  # a store prunes the expired member from the index
    assert await clients[0].zcard(f"{cache.base('t')}:idx") == 2
    for key in ("idx", "log", "seq"):  # the tenant's own keys expire too, never outliving entries
        assert await clients[0].pttl(f"{cache.base('t')}:{key}") > 0


async def test_second_instance_sees_stores_invalidations_and_clears(env, embedder):
    one, two = _cache(env, 0), _cache(env, 1)
    france, paraphrase = embedder.embed(FRANCE), embedder.embed("What's the capital of France?")
    entry_id = await one.store("t", FRANCE, france, PARIS, "m")
    assert (await two.lookup("t", "What's the capital of France?", paraphrase)).entry_id == entry_id

    assert await one.invalidate("t", entry_id)
    assert not await one.invalidate("t", entry_id)  # already gone
    assert await two.lookup("t", "What's the capital of France?", paraphrase) is None
    assert await two.lookup_exact("t", FRANCE) is None

    hamlet = embedder.embed("Who wrote Hamlet?")
    await one.store("t", FRANCE, france, PARIS, "m")
    await one.store("t", "Who wrote Hamlet?", hamlet, "Shakespeare", "m")
    assert (await two.lookup("t", "Who is the author of Hamlet?", hamlet)).answer == "Shakespeare"
    assert (await two.lookup("t", "What's the capital of France?", paraphrase)).answer == PARIS

    assert await one.clear("t") == 2
    assert await two.lookup("t", "Who wrote Hamlet?", hamlet) is None
    assert await two.lookup("t", "What's the capital of France?", paraphrase) is None
    assert (await two.stats("t")).entries == 0
    assert [k for k in await _keys(env) if ":e:" in k or ":x:" in k] == []


async def test_an_entry_gone_from_redis_is_never_served_from_memory(env, embedder):
    cache = _cache(env)
    vector = embedder.embed(FRANCE)
    entry_id = await cache.store("t", FRANCE, vector, PARIS, "m")
    assert await cache.lookup("t", "what's the capital of france", vector) is not None
    _, clients = env  # removed behind the cache's back: no version change
    await clients[0].delete(f"{cache.base('t')}:e:{entry_id}")
    assert await cache.lookup("t", "what's the capital of france", vector) is None
    assert await cache.lookup("t", FRANCE, vector) is None


async def test_restoring_a_query_replaces_its_entry(env, embedder):
    one, two = _cache(env, 0), _cache(env, 1)
    vector = embedder.embed(FRANCE)
    first = await one.store("t", FRANCE, vector, "old answer", "m")
    assert (await two.lookup("t", FRANCE, vector)).answer == "old answer"
    second = await one.store("t", "what is the capital of FRANCE", vector, PARIS, "m")
    assert second != first
    hit = await two.lookup("t", "What's the capital of France?", vector)
    assert hit.entry_id == second and hit.answer == PARIS
    assert (await two.stats("t")).entries == 1


async def test_bound_evicts_the_oldest(env, embedder):
    one, two = _cache(env, 0, max_entries=3), _cache(env, 1, max_entries=3)
    questions = [
        "Who wrote Hamlet?",
        "Why is the sky blue?",
        "How do I boil an egg?",
        "What is photosynthesis?",
        "How tall is Mount Everest?",
    ]
    vectors = embedder.embed_many(questions)
    for question, vector in zip(questions[:3], vectors[:3], strict=True):
        await one.store("t", question, vector, f"answer to {question}", "m")
    assert await two.lookup("t", questions[0], vectors[0]) is not None  # two loads its view
    for question, vector in zip(questions[3:], vectors[3:], strict=True):
        await one.store("t", question, vector, f"answer to {question}", "m")
    for question, vector in zip(questions[:2], vectors[:2], strict=True):
        assert await two.lookup("t", question, vector) is None
    for question, vector in zip(questions[2:], vectors[2:], strict=True):
        assert (await two.lookup("t", question, vector)).answer == f"answer to {question}"
    stats = await two.stats("t")
    assert (stats.entries, stats.stores, stats.evictions) == (3, 5, 2)
    keys = await _keys(env)
    assert sum(":e:" in k for k in keys) == 3 and sum(":x:" in k for k in keys) == 3


async def test_counters_are_shared_between_instances(env, embedder):
    one, two = _cache(env, 0), _cache(env, 1)
    vector = embedder.embed(FRANCE)
    await one.store("t", FRANCE, vector, PARIS, "m")
    assert await one.lookup("t", FRANCE, vector) is not None  # exact
    assert await one.lookup("t", "What's the capital of France?", vector) is not None
    assert await two.lookup_exact("t", FRANCE) is not None  # exact
    assert await two.lookup_exact("t", "capital of Italy") is None  # not counted: no outcome
    bread = embedder.embed("How do I bake bread?")
    assert await two.lookup("t", "How do I bake bread?", bread) is None
    for cache in (one, two):
        stats = await cache.stats("t")
        assert (stats.hits, stats.exact_hits, stats.misses, stats.stores) == (3, 2, 1, 1)
        assert stats.hit_rate == 0.75
    await one.drop_counters("t")
    assert (await two.stats("t")).hits == 0


async def test_unreachable_redis_raises_cache_error(embedder):
    redis = redis_client("redis://127.0.0.1:1/0", wait_s=0.2)
    cache = SemanticCache(redis, "x")
    vector = embedder.embed(FRANCE)
    try:
        with pytest.raises(CacheError):
            await cache.lookup("t", FRANCE, vector)
        with pytest.raises(CacheError):
            await cache.store("t", FRANCE, vector, PARIS, "m")
        with pytest.raises(CacheError):
            await cache.clear("t")
    finally:
        await redis.aclose()


async def test_change_log_catch_up_gaps_and_backlog(env, embedder):
    one, two = _cache(env, 0), _cache(env, 1, log_length=4)
    questions = [f"Who wrote the book number {i}?" for i in range(8)]
    vectors = embedder.embed_many(questions)

    async def answer(i: int) -> str | None:  # not an exact repeat: served from `two`'s rows
        hit = await two.lookup("t", f"Tell me who wrote the book number {i}", vectors[i])
        return hit and hit.answer

    await one.store("t", questions[0], vectors[0], "a0", "m")
    assert await answer(0) == "a0"  # the first lookup loads in full
    state = two._tenants["t"]
    rows = state.rows
    assert state.loaded and state.seq == 1

    second = await one.store("t", questions[1], vectors[1], "a1", "m")
    assert await answer(1) == "a1"  # caught up from the log, in place
    assert state.rows is rows and second in rows.row_of and state.seq == 2
    await one.invalidate("t", second)
    assert await answer(1) is None
    assert second not in rows.row_of and state.seq == 3

    _, clients = env
    await one.store("t", questions[2], vectors[2], "a2", "m")
    await clients[0].xtrim(f"{one.base('t')}:log", maxlen=0)  # trimmed past what `two` read
    await one.store("t", questions[3], vectors[3], "a3", "m")
    assert await answer(2) == "a2"
    assert state.rows is not rows and state.seq == 5 and len(state.rows) == 3

    for i in range(4, 8):  # a backlog as long as `two` reads at once: a full reload
        await one.store("t", questions[i], vectors[i], f"a{i}", "m")
    assert await answer(7) == "a7"
    assert state.seq == 9 and len(state.rows) == 7

    # the log and its counter expired and restarted: the numbers no longer follow on
    await clients[0].delete(f"{one.base('t')}:log", f"{one.base('t')}:seq")
    await one.store("t", "Why is the sky blue?", embedder.embed("Why is the sky blue?"), "R", "m")
    sky = embedder.embed("Why's the sky blue?")
    assert (await two.lookup("t", "Why's the sky blue?", sky)).answer == "R"
    assert state.seq == 1 and len(state.rows) == 8

    assert await one.clear("t") == 8
    assert await answer(0) is None
    assert len(state.rows) == 0 and state.seq == 2


async def test_the_operators_cli_finds_invalidates_and_clears(env, embedder):
    from infra.cache_cli import run

    cache = _cache(env)
    entry_id = await cache.store("t1", FRANCE, embedder.embed(FRANCE), PARIS, "smol")
    found = await run(cache, "find", "t1", "What's the capital of France?")
    assert found.startswith(entry_id) and PARIS in found
    assert "1 entries" in await run(cache, "stats", "t1", None)
    assert await run(cache, "invalidate", "t1", entry_id) == f"{entry_id}: invalidated"
    assert await run(cache, "find", "t1", FRANCE) == "no entry would answer it"
    await cache.store("t1", FRANCE, embedder.embed(FRANCE), PARIS, "smol")
    assert await run(cache, "clear", "t1", None) == "t1: 1 entries removed"
