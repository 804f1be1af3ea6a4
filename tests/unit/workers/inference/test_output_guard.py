"""The output guard: the safety gate's decisions turned into relays, windows and stops (no
Kafka or Redis: the I/O is recorded)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from moderation.output_gate import GateConfig, OutputGate, Policy
from schemas.events import FinishReason, SafetyAction, SafetyStage, SafetyVerdict
from workers.inference.output_guard import OutputGuard, SafetyStop


class Recorder:
    def __init__(self) -> None:
        self.now = 0.0
        self.relayed: list[str] = []
        self.windows: list[int] = []
        self.stops: list[SafetyStop] = []

    def guard(
        self,
        policy: Policy,
        deadline_ms: float = 1000.0,
        stop: Callable[[SafetyStop], None] | None = None,
    ) -> OutputGuard:
        async def relay(text: str) -> None:
            self.relayed.append(text)

        async def send_window(window) -> None:
            self.windows.append(window.index)

        config = GateConfig(
            policy=policy, window_tokens=3, overlap_tokens=1, deadline_ms=deadline_ms
        )
        return OutputGuard(
            OutputGate(config),
            relay=relay,
            send_window=send_window,
            stop=stop or self.stops.append,
            clock_ms=lambda: self.now,
        )


async def test_hold_back_relays_released_text_as_the_deltas_it_was_made_of():
    rec = Recorder()
    guard = rec.guard(Policy.HOLD_BACK)
    for word in ["one ", "two ", "three ", "four "]:
        await guard.delta(word, 1)
    assert rec.relayed == [] and rec.windows == [0]  # nothing shown before a release
    await guard.verdict(0, "release", [])
    assert rec.relayed == ["one ", "two ", "three "]
    await guard.finish()
    assert rec.windows == [0, 1] and not guard.settled.is_set()
    await guard.verdict(1, "release", [])
    assert rec.relayed[-1] == "four " and guard.settled.is_set() and guard.stopped is None
    assert guard.shown_text == "one two three four "


async def test_a_cut_stops_with_the_canned_reply_for_its_labels():
    rec = Recorder()
    guard = rec.guard(Policy.OPTIMISTIC)
    for word in ["my ", "key ", "is "]:
        await guard.delta(word, 1)
    assert rec.relayed == ["my ", "key ", "is "]  # optimistic: shown at once
    await guard.verdict(0, "cut", ["secret_leak"])
    (stop,) = rec.stops
    assert stop.finish_reason == FinishReason.SAFETY and stop.error.code == "output_cut"
    assert "secret" in stop.replacement and guard.stopped == stop and guard.settled.is_set()
    await guard.delta("sk-123 ", 1)
    assert rec.relayed == ["my ", "key ", "is "]  # nothing more after the cut


async def test_hold_back_fails_closed_when_no_verdict_comes():
    rec = Recorder()
    guard = rec.guard(Policy.HOLD_BACK, deadline_ms=50)
    for word in ["a ", "b ", "c "]:
        await guard.delta(word, 1)
    await guard.finish()
    rec.now = 100.0  # past the deadline
    await guard.wait_settled(tick_s=0.001)
    (stop,) = rec.stops
    assert stop.finish_reason == FinishReason.ERROR and stop.error.code == "safety_unavailable"
    assert stop.error.retryable and rec.relayed == []


async def test_optimistic_ends_unaudited_when_no_verdict_comes():
    rec = Recorder()
    guard = rec.guard(Policy.OPTIMISTIC, deadline_ms=50)
    await guard.delta("hello ", 1)
    await guard.finish()
    rec.now = 100.0
    await guard.wait_settled(tick_s=0.001)
    assert rec.stops == [] and guard.stopped is None and guard.gate.summary().unaudited
    assert rec.relayed == ["hello "]


def _verdict(
    window: int, action: SafetyAction, checker: str = "safety-1", **fields
) -> SafetyVerdict:
    return SafetyVerdict(
        turn_id="t",
        conversation_id="c",
        tenant_id="acme",
        user_id="u",
        stage=SafetyStage.OUTPUT,
        action=action,
        window=window,
        checker=checker,
        at_ms=1.0,
        **fields,
    )


async def test_the_verdicts_received_are_kept_in_window_order_for_the_completion():
    """They reach the events log only on the turn's completion: every window's, once (a
    window judged twice after a redelivery keeps its last verdict)."""
    rec = Recorder()
    guard = rec.guard(Policy.HOLD_BACK)
    for word in ["one ", "two ", "three ", "four "]:
        await guard.delta(word, 1)
    await guard.finish()
    await guard.received(_verdict(1, SafetyAction.RELEASE))
    await guard.received(_verdict(0, SafetyAction.RELEASE, checker="safety-1"))
    await guard.received(_verdict(0, SafetyAction.RELEASE, checker="safety-2"))
    assert guard.settled.is_set() and guard.shown_text == "one two three four "
    assert [(v.window, v.checker) for v in guard.verdicts] == [(0, "safety-2"), (1, "safety-1")]


async def test_the_summary_counts_the_windows_the_classifier_released():
    """What the audit's coverage reads: a window the rules alone judged, or the classifier
    failed on, is not counted."""
    rec = Recorder()
    guard = rec.guard(Policy.OPTIMISTIC)
    for word in ["a ", "b ", "c ", "d ", "e ", "f ", "g "]:
        await guard.delta(word, 1)
    await guard.finish()
    read = {"harm": -1.0, "harm_threshold": 0.46}
    await guard.received(_verdict(0, SafetyAction.RELEASE, scores=read))
    await guard.received(_verdict(1, SafetyAction.RELEASE, scores={"profanity": 0.1}))
    await guard.received(_verdict(2, SafetyAction.RELEASE, scores=read, error="classifier"))
    summary = guard.summary()
    assert (summary.windows, summary.released, summary.classified) == (3, 3, 1)


async def test_a_cut_of_the_last_window_stops_the_task_waiting_for_it():
    """The worker stops a cut answer by cancelling its own generation task, which is then
    in `wait_settled`; the verdict sets `settled` and cancels in the same step, and a wait
    that drops such a cancel (Python 3.11's `asyncio.wait_for`) let the cut answer end
    as "stop" (its trace said `cut_window=0`)."""
    rec = Recorder()
    waiting: list[asyncio.Task] = []

    def stop(how: SafetyStop) -> None:  # as the worker's: recorded, the waiting task cancelled
        rec.stops.append(how)
        for task in waiting:
            task.cancel()

    guard = rec.guard(Policy.OPTIMISTIC, stop=stop)
    await guard.delta("one two ", 2)
    await guard.finish()
    task = asyncio.create_task(guard.wait_settled(tick_s=10))
    waiting.append(task)
    await asyncio.sleep(0)  # it waits
    await guard.verdict(0, "cut", ["injection"])
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()
