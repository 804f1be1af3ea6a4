"""Routing one turn: the semantic pool, configured pools only, admission's forced pool, and
the fallback when a pool has no live worker."""

from __future__ import annotations

from schemas.events import Message, Role
from schemas.worker_state import WorkerState
from stream_jobs.assembly.routing.endpoint_picker import EndpointPicker
from stream_jobs.assembly.routing.route import Intent, Routing


class Always:
    def __init__(self, pool: str) -> None:
        self.pool = pool

    def decide(
        self,
        text: str,
        *,
        has_images: bool = False,
        history_turns: int = 0,
        previous=None,
        classify: bool = True,
    ) -> Intent:
        return Intent(self.pool, "coding", False, "rule code", 1.0)


def test_a_short_follow_up_keeps_the_conversation_on_its_pool():
    from stream_jobs.assembly.routing.semantic_router import RouterConfig, SemanticRouter

    r = routing(SemanticRouter(RouterConfig.default()))
    first = r.intent(
        "Prove that the square root of 2 is irrational.", has_images=False, history_turns=0
    )
    follow = r.intent("why?", has_images=False, history_turns=1, previous=first)
    assert first.pool == "reasoning" and follow.pool == "reasoning"
    assert "follow-up" in follow.reason


class Board:
    """The board's reading, as the Redis one returns it (the logic under test is above it)."""

    def __init__(self, states: dict[str, list[WorkerState]]) -> None:
        self.states_by_pool = states

    async def states(self, pool: str) -> list[WorkerState]:
        return self.states_by_pool.get(pool, [])


def worker(name: str, pool: str, partition: int) -> WorkerState:
    return WorkerState(worker_id=name, pool=pool, at_ms=1000, partitions=[partition], capacity=4)


def routing(intents, board=None) -> Routing:
    return Routing(
        pools=("chat", "reasoning"),
        intents=intents,
        board=board,
        picker=EndpointPicker(ttl_ms=500),
        clock_ms=lambda: 1100,
    )


def test_the_semantic_pool_and_its_limits():
    assert routing(Always("reasoning")).intent("x", has_images=False, history_turns=0).pool == (
        "reasoning"
    )
    unknown = routing(Always("vision")).intent("x", has_images=False, history_turns=0)
    assert unknown.pool == "chat" and "not configured" in unknown.reason
    forced = routing(Always("reasoning")).intent(
        "x", has_images=False, history_turns=0, forced_pool="chat"
    )
    assert forced.pool == "chat" and "degraded" in forced.reason and forced.intent == "coding"
    plain = routing(None).intent("x", has_images=False, history_turns=0)
    assert (plain.pool, plain.retrieval) == ("chat", True)


async def test_a_pool_without_live_workers_hands_its_turns_to_the_default_pool():
    messages = [Message(Role.USER, "prove it")]
    board = Board({"chat": [worker("c1", "chat", 3)], "reasoning": []})
    r = routing(Always("reasoning"), board)
    intent = r.intent("prove it", has_images=False, history_turns=0)
    route = await r.place(intent, messages, b"conv")
    assert (route.pool, route.worker_id, route.partition) == ("chat", "c1", 3)
    assert "no live worker" in route.reason
    board.states_by_pool["reasoning"] = [worker("r1", "reasoning", 5)]
    route = await r.place(intent, messages, b"conv")
    assert (route.pool, route.worker_id, route.partition, route.strategy) == (
        "reasoning",
        "r1",
        5,
        "router",
    )


async def test_at_startup_with_no_worker_anywhere_the_default_pool_keeps_the_turn():
    r = routing(Always("reasoning"), Board({}))
    intent = r.intent("prove it", has_images=False, history_turns=0)
    route = await r.place(intent, [Message(Role.USER, "prove it")], b"conv")
    assert (route.pool, route.partition) == ("chat", -1)  # key hash on the default pool


async def test_the_classifier_is_skipped_when_its_answer_cannot_change_anything():
    from stream_jobs.assembly.routing.semantic_router import RouterConfig, SemanticRouter

    calls = []

    def embed(texts):
        import numpy as np

        calls.append(len(texts))
        return np.ones((len(texts), 4), np.float32) / 2

    router = SemanticRouter(RouterConfig.default(), embed)
    at_start = len(calls)  # the examples' centroids
    decided = router.decide("Tell me something nice about rivers.", classify=False)
    assert len(calls) == at_start and decided.reason.startswith("default")
    router.decide("Tell me something nice about rivers.")
    assert len(calls) == at_start + 1
    one_pool = routing(router, Board({"chat": [worker("c1", "chat", 0)]}))
    two_pools = routing(
        router,
        Board({"chat": [worker("c1", "chat", 0)], "reasoning": [worker("r", "reasoning", 1)]}),
    )
    assert (await one_pool.live_pools(), await two_pools.live_pools()) == (1, 2)


async def test_a_prompt_is_matched_to_the_cache_of_its_own_tenant_only():
    """Workers remember prompts under their tenant's cache salt (the engine's blocks are
    salted the same way): an identical prompt of another tenant is not a cache hit."""
    import msgspec

    from schemas.prefix import message_chain

    messages = [Message(Role.USER, "a long pasted document " * 40), Message(Role.USER, "sum up")]
    holder = msgspec.structs.replace(
        worker("w1", "chat", 1), prefixes=[message_chain(messages[:1], "acme")[-1]]
    )
    r = routing(Always("chat"), Board({"chat": [holder, worker("w2", "chat", 2)]}))
    intent = r.intent("sum up", has_images=False, history_turns=1)
    own = await r.place(intent, messages, b"conv", salt="acme")
    other = await r.place(intent, messages, b"conv", salt="globex")
    assert own.worker_id == "w1" and own.prefix_chars > 0
    assert other.prefix_chars == 0
