"""The fake engine's optional prefill, prefix cache and batch limit (timed by a fake clock)."""

import asyncio
import heapq
import itertools
from dataclasses import replace

import pytest

from schemas.events import DecodingParams, Message, Role
from workers.inference.engines.engine import GenerationRequest
from workers.inference.engines.fake_engine import FakeEngine, SimulatedPrefixCache, message_tokens

DOC = "lorem ipsum dolor sit amet " * 400  # ~2700 tokens at four characters a token


class VirtualClock:
    """Virtual time: a sleeper wakes when the time reaches its deadline; `run` lets every
    runnable task settle, then jumps the time to the next deadline (no real waiting)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), woken))
        await woken

    async def run(self, *awaitables):
        tasks = [asyncio.ensure_future(a) for a in awaitables]
        while not all(t.done() for t in tasks):
            for _ in range(50):  # pure asyncio code: a few rounds settle everything
                await asyncio.sleep(0)
            if self._sleepers:
                self.now, _, woken = heapq.heappop(self._sleepers)
                if not woken.done():
                    woken.set_result(None)
        return await asyncio.gather(*tasks, return_exceptions=True)


def request(*texts: str, request_id: str = "r", max_tokens: int = 3) -> GenerationRequest:
    roles = [Role.USER if i % 2 == 0 else Role.ASSISTANT for i in range(len(texts))]
    messages = [Message(role, text) for role, text in zip(roles, texts, strict=True)]
    return GenerationRequest(request_id, messages, DecodingParams(max_tokens=max_tokens))


async def ttft(engine: FakeEngine, clock: VirtualClock, req: GenerationRequest):
    """(seconds to the first token, the deltas)."""
    started = clock.now
    first = None
    deltas = []
    async for delta in engine.stream(req):
        first = clock.now - started if first is None else first
        deltas.append(delta)
    return first, deltas


async def timed(engine: FakeEngine, clock: VirtualClock, req: GenerationRequest):
    [result] = await clock.run(ttft(engine, clock, req))
    return result


def engine_on(clock: VirtualClock, **options) -> FakeEngine:
    defaults = {"token_interval_s": 0.01, "prefill_ms_per_token": 1.0}
    defaults["prefix_cache_tokens"] = 10_000
    return FakeEngine(sleep=clock.sleep, **(defaults | options))


async def test_a_repeated_prefix_is_served_from_the_cache_and_answers_sooner():
    clock = VirtualClock()
    engine = engine_on(clock)
    first, deltas = await timed(engine, clock, request(DOC + "summarise"))
    prompt = deltas[-1].prompt_tokens
    assert deltas[-1].cached_prompt_tokens == 0 and first > 2.0  # ~2700 tokens at 1 ms
    follow = request(DOC + "summarise", "You said: lorem", "and the second part?")
    second, deltas = await timed(engine, clock, follow)
    assert deltas[-1].cached_prompt_tokens == prompt  # the whole first prompt
    assert deltas[-1].prompt_tokens > prompt and second < first / 10
    snap = engine.snapshot()
    total = prompt + deltas[-1].prompt_tokens
    assert (snap.prefix_cache_queries, snap.prefix_cache_hits) == (total, prompt)
    assert snap.prompt_tokens == total - prompt  # computed: not served from the cache


async def test_another_tenants_identical_prompt_finds_nothing_cached():
    clock = VirtualClock()
    engine = engine_on(clock)
    salted = lambda tenant: replace(request(DOC + "summarise"), cache_salt=tenant)  # noqa: E731
    _, first = await timed(engine, clock, salted("acme"))
    _, other = await timed(engine, clock, salted("globex"))
    _, again = await timed(engine, clock, salted("acme"))
    assert first[-1].cached_prompt_tokens == 0 and other[-1].cached_prompt_tokens == 0
    assert again[-1].cached_prompt_tokens == again[-1].prompt_tokens - 1 > 0  # its own: cached


async def test_an_evicted_prefix_is_prefilled_again():
    clock = VirtualClock()
    engine = engine_on(clock, prefix_cache_tokens=3000)  # one document at a time
    await timed(engine, clock, request(DOC + "one"))
    await timed(engine, clock, request("another document " * 600))
    _, deltas = await timed(engine, clock, request(DOC + "one", "You said:", "again"))
    assert deltas[-1].cached_prompt_tokens == 0


async def test_prefills_are_serialised_and_extra_streams_wait_for_a_slot():
    clock = VirtualClock()
    engine = engine_on(clock, prefix_cache_tokens=0, max_num_seqs=2)
    reqs = [request(f"doc {i} " + "x" * 4000, request_id=f"r{i}") for i in range(3)]

    async def probe():
        await clock.sleep(0.5)  # r0 prefilling, r1 admitted behind it, r2 without a slot
        return engine.snapshot()

    *results, during = await clock.run(*(ttft(engine, clock, r) for r in reqs), probe())
    assert (during.running, during.waiting) == (2, 1)
    # 1.003 s of prefill each, one after another, then the first token (10 ms); the third
    # got its slot when the first ended, then waited for the second's prefill
    assert [first for first, _ in results] == pytest.approx([1.013, 2.016, 3.019])
    assert engine.snapshot().waiting == 0 and engine.active == 0


async def test_a_cancelled_waiting_stream_frees_nothing_it_did_not_hold():
    clock = VirtualClock()
    engine = engine_on(clock, max_num_seqs=1)
    hog = asyncio.create_task(ttft(engine, clock, request("a " * 100, max_tokens=50)))
    await asyncio.sleep(0)  # the hog takes the only slot
    waiting = asyncio.create_task(ttft(engine, clock, request("b", request_id="w")))

    async def cancel_the_waiting_one():
        await clock.sleep(0.001)
        assert engine.snapshot().waiting == 1 and engine.requests == ["r", "w"]
        waiting.cancel()

    await clock.run(cancel_the_waiting_one(), hog)
    await asyncio.gather(waiting, return_exceptions=True)
    assert engine.aborted == ["w"] and engine.waiting == 0 and engine.kv_tokens == 0
    _, deltas = await timed(engine, clock, request("c"))  # the slot is free again
    assert deltas


async def test_defaults_keep_the_plain_echo():
    engine = FakeEngine(token_interval_s=0)
    deltas = [d async for d in engine.stream(request("a b c", max_tokens=100))]
    assert deltas[-1].prompt_tokens == 7 and deltas[-1].cached_prompt_tokens == 0
    snap = engine.snapshot()
    assert (snap.prefix_cache_queries, snap.waiting, snap.prompt_tokens) == (0, 0, 7)


def test_the_cache_evicts_tails_before_heads_and_stops_at_the_first_miss():
    cache = SimulatedPrefixCache(capacity_tokens=100)
    cache.insert([1, 2], [60, 30])
    assert cache.lookup([1, 2, 3], [60, 30, 5]) == 90
    cache.insert([7], [20])  # over capacity: the oldest is the tail of [1, 2]
    assert cache.lookup([1, 2], [60, 30]) == 60 and cache.tokens == 80
    assert cache.lookup([9, 1], [10, 60]) == 0  # same message later in the prompt: no match


def test_message_tokens_sum_to_the_prompt_size():
    req = request("x" * 400, "y" * 40)
    assert sum(message_tokens(req)) == (400 + 8 + 40 + 8) // 4
