"""One streaming answer under the incremental safety check: the bridge between the pure
`OutputGate` (what to show, what to check, when to stop) and the worker's I/O.

The guard relays released text as the engine's own deltas (a hold-back release spans whole
deltas: windows end on delta boundaries), so clients see the same chunks with or without
holding back. It ends in one of three ways, once: `settled` with no stop (every window
judged, or optimistic gave up waiting: `unaudited`), a cut (the answer is replaced by a
canned reply the history keeps), or a fail-closed timeout (hold-back: no verdict in time).
The verdicts it received are kept, one per window, for the turn's `turn.completed`: the
events log reads them there.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from moderation.language import detect
from moderation.output_gate import GateStep, OutputGate
from moderation.recording import released_by_classifier
from moderation.verdict import Action, reason_for
from moderation.windows import Window
from schemas.events import OUTPUT_CUT, ErrorInfo, FinishReason, OutputSafety, SafetyVerdict

CUT_REPLY = "I can't continue with that answer."


@dataclass(frozen=True, slots=True)
class SafetyStop:
    """How a stopped answer ends: its finish reason, error, and the text that replaces it."""

    finish_reason: FinishReason
    error: ErrorInfo
    replacement: str


class OutputGuard:
    def __init__(
        self,
        gate: OutputGate,
        *,
        relay: Callable[[str], Awaitable[None]],
        send_window: Callable[[Window], Awaitable[None]],
        stop: Callable[[SafetyStop], None],
        clock_ms: Callable[[], float],
    ) -> None:
        self.gate = gate
        self._relay = relay
        self._send_window = send_window
        self._stop = stop
        self._clock_ms = clock_ms
        self._unshown: deque[str] = deque()  # deltas received, not yet relayed
        self._shown: list[str] = []
        self._cut_labels: list[str] = []
        self._received: dict[int, SafetyVerdict] = {}  # by window: a redelivery replaces
        self.settled = asyncio.Event()
        self.stopped: SafetyStop | None = None

    async def delta(self, text: str, tokens: int) -> None:
        if text:
            self._unshown.append(text)
        await self._apply(self.gate.on_delta(text, tokens, self._clock_ms()))

    async def received(self, verdict: SafetyVerdict) -> None:
        """A verdict from the safety worker: kept for the record, then applied."""
        self._received[verdict.window] = verdict
        await self.verdict(verdict.window, str(verdict.action), verdict.labels)

    @property
    def verdicts(self) -> list[SafetyVerdict]:
        """The verdicts received, in window order."""
        return [self._received[w] for w in sorted(self._received)]

    async def verdict(self, window: int, action: str, labels: list[str]) -> None:
        if action != Action.RELEASE:
            self._cut_labels = labels
        await self._apply(self.gate.on_verdict(window, Action(action), self._clock_ms()))

    async def finish(self) -> None:
        """The engine is done: judge the last partial window, then wait for `settled`."""
        await self._apply(self.gate.on_finish(self._clock_ms()))

    async def wait_settled(self, tick_s: float = 0.05) -> None:
        """Until every verdict is in, or the deadline passed (ticks check it)."""
        while not self.settled.is_set():
            try:
                async with asyncio.timeout(tick_s):
                    await self.settled.wait()
            except TimeoutError:
                await self._apply(self.gate.on_tick(self._clock_ms()))

    async def _apply(self, step: GateStep) -> None:
        if step.relay:
            await self._relay_released(step.relay)
        for window in step.windows:
            await self._send_window(window)
        if step.cut is not None:
            answer = "".join([*self._shown, *self._unshown])
            reason = reason_for(tuple(self._cut_labels), detect(answer)) or CUT_REPLY
            error = ErrorInfo(OUTPUT_CUT, reason, retryable=False)
            self._end(SafetyStop(FinishReason.SAFETY, error, replacement=reason))
        elif step.failed is not None:
            message = "the safety check did not answer in time; the answer was withheld"
            error = ErrorInfo("safety_unavailable", message, retryable=True)
            self._end(SafetyStop(FinishReason.ERROR, error, replacement=""))
        elif step.done:
            self.settled.set()

    async def _relay_released(self, released: str) -> None:
        """Relay `released` as the deltas it is made of."""
        while released and self._unshown:
            piece = self._unshown.popleft()
            if len(piece) > len(released):  # a window ended inside a delta (huge tokens)
                self._unshown.appendleft(piece[len(released) :])
                piece = released
            released = released[len(piece) :]
            self._shown.append(piece)
            await self._relay(piece)

    @property
    def shown_text(self) -> str:
        """What reached the user (hold-back: only released windows)."""
        return "".join(self._shown)

    def _end(self, stop: SafetyStop) -> None:
        self.stopped = stop
        self.settled.set()
        self._stop(stop)

    def summary(self) -> OutputSafety:
        numbers = self.gate.summary()
        latencies = sorted(numbers.verdict_latency_ms)
        return OutputSafety(
            policy=str(self.gate.config.policy),
            windows=numbers.windows_sent,
            released=numbers.windows_released,
            cut_window=-1 if numbers.cut_window is None else numbers.cut_window,
            unaudited=numbers.unaudited,
            max_hold_ms=round(numbers.max_hold_ms, 3),
            verdict_p50_ms=round(latencies[len(latencies) // 2], 3) if latencies else 0.0,
            classified=sum(released_by_classifier(v) for v in self._received.values()),
        )
