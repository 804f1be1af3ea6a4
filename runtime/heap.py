"""Keeping the cyclic garbage collector's pauses short in a process that holds many
long-lived objects.

Why: an edge holding 10k connections has ~1.1M objects, and CPython's full collection walks
every one of them: 0.3 to 2.3 s with the whole process stopped (docs/protocol.md), so every
stream it serves stalls. Objects in the *permanent* generation (`gc.freeze`) are never
walked. So, every `freeze_interval_s`, the keeper runs a full collection (it walks only what
was created since the last freeze: short) and freezes what survived.

The price: a cycle that dies *after* it was frozen (a closed connection's objects, where they
form cycles) is not reclaimed while frozen. The keeper bounds that: once the frozen heap has
grown `thaw_growth` times since the last thaw (and by at least `thaw_floor` objects), and at
most once per `thaw_every_s`, it thaws it and runs one full collection over everything (one
long pause, instead of one whenever CPython's own thresholds fire: 18 in a two-minute
benchmark at 10k connections), then freezes again.

`next_step` is the decision (pure); `HeapKeeper` applies it to the `gc` module.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger("turnstream.heap")

SLOW_STEP_MS = 50.0  # a step (a pause of the whole process) longer than this is logged


class Step(Enum):
    FREEZE = "freeze"  # collect what is not frozen, freeze the survivors
    THAW = "thaw"  # unfreeze everything, collect it all, freeze the survivors


@dataclass(frozen=True, slots=True)
class HeapPolicy:
    freeze_interval_s: float  # 0: the keeper is off (CPython's own thresholds only)
    thaw_growth: float = 2.0
    thaw_floor: int = 200_000
    thaw_every_s: float = 600.0  # at most one thaw (one long pause) per this long
    count_every_s: float = 30.0  # once a thaw is allowed, count the frozen heap this often

    def __post_init__(self) -> None:
        if (
            self.freeze_interval_s < 0
            or self.thaw_growth <= 1
            or self.thaw_floor < 0
            or self.thaw_every_s < 0
            or self.count_every_s < 0
        ):
            raise ValueError(
                "need freeze_interval_s >= 0, thaw_growth > 1, and thaw_floor, thaw_every_s,"
                " count_every_s >= 0"
            )


def next_step(frozen: int, frozen_after_thaw: int, since_thaw_s: float, policy: HeapPolicy) -> Step:
    """Thaw once the frozen heap outgrew what survived the last thaw by the policy's factor
    and floor (it may hold dead cycles by then), if the last thaw is old enough; otherwise
    freeze the newcomers."""
    grown = frozen - frozen_after_thaw
    if (
        since_thaw_s >= policy.thaw_every_s
        and grown >= policy.thaw_floor
        and frozen >= policy.thaw_growth * frozen_after_thaw
    ):
        return Step.THAW
    return Step.FREEZE


@dataclass(slots=True)
class HeapStats:
    freezes: int = 0
    thaws: int = 0
    frozen_after_thaw: int = 0  # objects in the permanent generation after the last thaw
    collected: int = 0  # unreachable objects found by the keeper's collections
    last_freeze_ms: float = 0.0
    last_thaw_ms: float = 0.0


class HeapKeeper:
    """Applies `HeapPolicy` to this process's collector: `step()` once, `run()` forever.

    Counting the frozen objects walks them all (~5 ms a million), so a step counts them
    only when the clock allows a thaw, then at most every `count_every_s` (a heap that
    never doubles would otherwise be counted at every step: ~1% of a core at 10k
    connections), and to report a slow step."""

    def __init__(self, policy: HeapPolicy, clock_s: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.stats = HeapStats()
        self._clock_s = clock_s
        self._thawed_at_s = clock_s()
        self._counted_at_s = float("-inf")

    def start(self) -> None:
        """Freeze what start-up built (modules, settings, models): never garbage. Counts as
        a thaw (a full collection of everything)."""
        self.stats.collected += gc.collect()
        gc.freeze()
        self.stats.frozen_after_thaw = gc.get_freeze_count()
        self._thawed_at_s = self._clock_s()

    def step(self) -> Step:
        now_s = self._clock_s()
        since_thaw_s = now_s - self._thawed_at_s
        step = Step.FREEZE
        if (
            since_thaw_s >= self.policy.thaw_every_s
            and now_s - self._counted_at_s >= self.policy.count_every_s
        ):
            self._counted_at_s = now_s
            frozen = gc.get_freeze_count()
            step = next_step(frozen, self.stats.frozen_after_thaw, since_thaw_s, self.policy)
        started = time.perf_counter()
        if step is Step.THAW:
            gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.stats.collected += collected
        if step is Step.THAW:
            self.stats.frozen_after_thaw = gc.get_freeze_count()
            self._thawed_at_s = self._clock_s()
            self.stats.thaws += 1
            self.stats.last_thaw_ms = elapsed_ms
            log.info(
                "heap thawed and collected: %d unreachable, %d objects kept, %.0f ms",
                collected,
                self.stats.frozen_after_thaw,
                elapsed_ms,
            )
        else:
            self.stats.freezes += 1
            self.stats.last_freeze_ms = elapsed_ms
            if elapsed_ms > SLOW_STEP_MS:  # a shorter interval walks fewer newcomers a time
                log.warning(
                    "heap step took %.0f ms (%d unreachable collected, %d objects frozen)",
                    elapsed_ms,
                    collected,
                    gc.get_freeze_count(),
                )
        return step

    async def run(self) -> None:
        """Step every `freeze_interval_s` until cancelled; the frozen heap is thawed on the
        way out (a process going on without the keeper gets its normal collector back)."""
        if self.policy.freeze_interval_s <= 0:
            return
        self.start()
        try:
            while True:
                await asyncio.sleep(self.policy.freeze_interval_s)
                self.step()
        finally:
            gc.unfreeze()
