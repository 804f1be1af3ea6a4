"""The heap keeper: full collections walk only what it has not frozen, and dead cycles it
froze are reclaimed at a thaw."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from runtime import heap
from runtime.heap import HeapKeeper, HeapPolicy, Step, next_step

NEVER_THAW = HeapPolicy(1.0, thaw_floor=10**12)
THAW_NOW = HeapPolicy(1.0, thaw_growth=1.000001, thaw_floor=1, thaw_every_s=0)


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def dead_cycle_watch() -> weakref.ref[Node]:
    """A two-node cycle only a weak reference still sees once this returns."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_freezes_until_the_heap_outgrew_the_last_thaw() -> None:
    policy = HeapPolicy(1.0, thaw_growth=2.0, thaw_floor=1000, thaw_every_s=600)
    assert next_step(150_000, 100_000, 900, policy) is Step.FREEZE
    assert next_step(199_999, 100_000, 900, policy) is Step.FREEZE
    assert next_step(200_000, 100_000, 900, policy) is Step.THAW
    # a small heap doubling is not worth a walk: the floor
    assert next_step(1_500, 600, 900, policy) is Step.FREEZE
    assert next_step(1_600, 600, 900, policy) is Step.THAW
    # nor is a second long pause soon after the last one (a heap growing with its load)
    assert next_step(400_000, 100_000, 599, policy) is Step.FREEZE


def test_the_clock_since_the_last_thaw_decides_with_the_growth() -> None:
    now = [0.0]
    policy = HeapPolicy(1.0, thaw_growth=1.000001, thaw_floor=1, thaw_every_s=600)
    keeper = HeapKeeper(policy, clock_s=lambda: now[0])
    keeper.start()
    grown = [Node() for _ in range(1000)]
    now[0] = 599.0
    assert keeper.step() is Step.FREEZE
    grown += [Node() for _ in range(1000)]
    now[0] = 600.0
    assert keeper.step() is Step.THAW
    grown += [Node() for _ in range(1000)]
    now[0] = 1199.0
    assert keeper.step() is Step.FREEZE  # the thaw at 600 restarted the clock
    assert len(grown) == 3000


@pytest.mark.parametrize(
    "bad",
    [
        dict(freeze_interval_s=-1),
        dict(freeze_interval_s=1, thaw_growth=1.0),
        dict(freeze_interval_s=1, thaw_floor=-1),
        dict(freeze_interval_s=1, thaw_every_s=-1),
        dict(freeze_interval_s=1, count_every_s=-1),
    ],
)
def test_policy_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HeapPolicy(**bad)  # type: ignore[arg-type]


def test_a_step_takes_the_survivors_out_of_the_collectors_walk() -> None:
    keeper = HeapKeeper(NEVER_THAW)
    keeper.start()
    kept = [Node() for _ in range(100)]
    ids = {id(node) for node in kept}
    assert ids <= {id(o) for o in gc.get_objects()}  # walked by a full collection
    assert keeper.step() is Step.FREEZE
    assert not ids & {id(o) for o in gc.get_objects()}  # frozen: walked no more
    assert keeper.stats.freezes == 1 and keeper.stats.thaws == 0


def test_a_cycle_dead_before_the_step_is_collected_by_it() -> None:
    keeper = HeapKeeper(NEVER_THAW)
    keeper.start()
    watch = dead_cycle_watch()
    assert watch() is not None  # not yet collected
    keeper.step()
    assert watch() is None


def test_a_frozen_cycle_that_dies_waits_for_the_thaw() -> None:
    keeper = HeapKeeper(NEVER_THAW)
    keeper.start()
    a, b = Node(), Node()
    a.other, b.other = b, a
    watch = weakref.ref(a)
    keeper.step()  # the live cycle is frozen
    del a, b
    keeper.step()
    gc.collect()
    assert watch() is not None  # dead, frozen: not reclaimed by freezes or full collections
    keeper.policy = THAW_NOW
    # the frozen heap may not have grown since start(): objects frozen then can be freed by
    # their reference counts meanwhile (other threads of a long test run), and the growth
    # rule has its own tests above; here the policy's answer is "thaw" whatever the count
    keeper.stats.frozen_after_thaw = 0
    assert keeper.step() is Step.THAW
    assert watch() is None
    assert keeper.stats.thaws == 1
    assert keeper.stats.frozen_after_thaw > 0 and gc.get_freeze_count() > 0  # frozen again


def test_off_means_the_collector_is_left_alone() -> None:
    asyncio.run(HeapKeeper(HeapPolicy(0.0)).run())
    assert gc.get_freeze_count() == 0


def test_cancelling_the_keeper_thaws_the_heap() -> None:
    async def scenario() -> int:
        task = asyncio.create_task(HeapKeeper(HeapPolicy(0.01)).run())
        await asyncio.sleep(0.05)
        frozen = gc.get_freeze_count()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return frozen

    assert asyncio.run(scenario()) > 0
    assert gc.get_freeze_count() == 0


def test_the_frozen_heap_is_counted_at_most_every_count_interval(monkeypatch) -> None:
    """Counting walks every frozen object: once a thaw is allowed but the heap has not
    grown enough, it is not counted again at every step."""
    now = [0.0]
    policy = HeapPolicy(1.0, thaw_floor=10**12, thaw_every_s=600, count_every_s=30)
    keeper = HeapKeeper(policy, clock_s=lambda: now[0])
    keeper.start()
    monkeypatch.setattr(heap, "SLOW_STEP_MS", float("inf"))  # a slow step counts to log
    counts = []
    real_count = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", lambda: counts.append(now[0]) or real_count())
    for second in (599, 600, 600.5, 629, 630, 631):
        now[0] = second
        assert keeper.step() is Step.FREEZE
    assert counts == [600, 630]
