"""The engine's seats by tier: waiters seated highest priority first, then in arrival order;
the reserved seats kept from the low tiers; a cancelled waiter or holder gives its place
back. Pure asyncio."""

from __future__ import annotations

import asyncio

import pytest

from workers.inference.seats import EngineSeats, kv_need

FREE, PLUS, ENTERPRISE = 0, 10, 20


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def leave_all(diners) -> None:
    for diner in diners:
        diner.task.cancel()
    await asyncio.gather(*(d.task for d in diners), return_exceptions=True)


class Diner:
    """A turn that takes a seat, notes when it sat, and leaves when told."""

    def __init__(
        self, seats: EngineSeats, name: str, priority: int, order: list[str], kv: int = 0
    ) -> None:
        self.leave = asyncio.Event()
        self.task = asyncio.ensure_future(self._run(seats, name, priority, order, kv))

    async def _run(self, seats, name, priority, order, kv) -> None:
        async with seats.seat(priority, kv):
            order.append(name)
            await self.leave.wait()


async def test_waiters_are_seated_by_priority_then_arrival():
    seats, order = EngineSeats(2), []
    first = [Diner(seats, f"free-{i}", FREE, order) for i in range(2)]
    await settle()
    waiting = [
        Diner(seats, "free-2", FREE, order),
        Diner(seats, "plus-0", PLUS, order),
        Diner(seats, "enterprise-0", ENTERPRISE, order),
        Diner(seats, "free-3", FREE, order),
        Diner(seats, "enterprise-1", ENTERPRISE, order),
    ]
    await settle()
    assert order == ["free-0", "free-1"] and seats.waiting == 5
    for diner in [*first, *waiting]:
        diner.leave.set()
        await settle()
    assert order[2:] == ["enterprise-0", "enterprise-1", "plus-0", "free-2", "free-3"]
    await leave_all([*first, *waiting])
    assert seats.taken == 0 and seats.waiting == 0


async def test_the_low_tiers_leave_the_reserved_seats_free_for_the_high_ones():
    seats, order = EngineSeats(4, reserved=1, reserved_priority=PLUS), []
    free = [Diner(seats, f"free-{i}", FREE, order) for i in range(5)]
    await settle()
    assert order == ["free-0", "free-1", "free-2"]  # the fourth seat is kept
    assert not seats.may_sit(FREE) and seats.may_sit(PLUS)
    enterprise = Diner(seats, "enterprise", ENTERPRISE, order)
    await settle()
    assert order[-1] == "enterprise"  # at once, past the free turns waiting
    free[0].leave.set()
    await settle()
    assert order[-1] == "enterprise" and seats.taken == 3  # the reserved seat is kept again
    enterprise.leave.set()
    await settle()
    assert order[-1] == "free-3" and seats.taken == 3
    await leave_all(free)


async def test_with_no_reservation_every_seat_is_anyones():
    seats = EngineSeats(2)
    assert seats.may_sit(FREE)
    async with seats.seat(FREE), seats.seat(FREE):
        assert not seats.may_sit(ENTERPRISE)
    assert seats.taken == 0


async def test_a_waiter_cancelled_leaves_the_queue_and_a_holder_cancelled_frees_its_seat():
    seats, order = EngineSeats(1), []
    holder = Diner(seats, "a", FREE, order)
    gone = Diner(seats, "b", ENTERPRISE, order)
    after = Diner(seats, "c", FREE, order)
    await settle()
    gone.task.cancel()
    await settle()
    assert seats.waiting == 1
    holder.task.cancel()  # mid-answer: its seat goes to the next
    await settle()
    assert order == ["a", "c"] and seats.taken == 1
    after.leave.set()
    await settle()
    assert seats.taken == 0
    await leave_all([holder, gone, after])


async def test_a_waiter_cancelled_just_as_it_was_seated_gives_the_seat_on():
    seats = EngineSeats(1)
    order: list[str] = []
    holder = Diner(seats, "a", FREE, order)
    await settle()
    seated = asyncio.ensure_future(seats.seat(FREE).__aenter__())
    await settle()
    holder.leave.set()
    await asyncio.sleep(0)  # the seat is handed to the waiter, which has not run yet
    seated.cancel()
    await settle()
    assert seats.taken == 0 and seats.waiting == 0
    await leave_all([holder])


@pytest.mark.parametrize(("seats", "reserved"), [(0, 0), (2, 2), (2, -1)])
def test_impossible_seatings_are_refused(seats, reserved):
    with pytest.raises(ValueError):
        EngineSeats(seats, reserved=reserved)


async def test_the_low_tiers_share_a_kv_budget_and_a_higher_tier_does_not_count():
    seats = EngineSeats(8, reserved=1, reserved_priority=PLUS, low_kv=512)
    order: list[str] = []
    a = Diner(seats, "free-a", FREE, order, kv=256)
    b = Diner(seats, "free-b", FREE, order, kv=256)
    c = Diner(seats, "free-c", FREE, order, kv=256)  # the budget is spent: it stands
    plus = Diner(seats, "plus", PLUS, order, kv=512)  # not held to it
    await settle()
    assert order == ["free-a", "free-b", "plus"] and seats.low_kv_held == 512
    a.leave.set()
    await settle()
    assert order[-1] == "free-c" and seats.low_kv_held == 512
    await leave_all([b, c, plus])
    assert seats.taken == 0 and seats.low_kv_held == 0


async def test_a_low_tier_turn_larger_than_the_budget_still_runs_alone():
    seats = EngineSeats(8, low_kv=100, reserved_priority=PLUS)
    order: list[str] = []
    big = Diner(seats, "big", FREE, order, kv=1000)
    small = Diner(seats, "small", FREE, order, kv=10)
    await settle()
    assert order == ["big"]
    big.leave.set()
    await settle()
    assert order == ["big", "small"]
    await leave_all([small])
    assert seats.low_kv_held == 0


async def test_a_waiter_cancelled_gives_its_kv_back():
    seats = EngineSeats(8, low_kv=100, reserved_priority=PLUS)
    order: list[str] = []
    first = Diner(seats, "first", FREE, order, kv=100)
    second = Diner(seats, "second", FREE, order, kv=100)
    await settle()
    second.task.cancel()
    await asyncio.gather(second.task, return_exceptions=True)
    assert seats.low_kv_held == 100 and seats.waiting == 0
    await leave_all([first])
    assert seats.low_kv_held == 0 and seats.taken == 0


def test_kv_need_rounds_the_prompt_and_answer_up_to_whole_blocks():
    assert kv_need(30, 96, 128) == 128
    assert kv_need(40, 96, 128) == 256
    assert kv_need(0, 0, 16) == 0
    assert kv_need(5, 5) == 10
