"""Per-turn decision logic of the incremental output check: which windows of the answer go to
the safety worker, what of the answer may reach the user, and when the answer is cut or fails.

The inference worker owns one `OutputGate` per streaming turn and feeds it every generated
delta, every verdict from the safety worker, the end of generation and periodic ticks. Each
call returns a `GateStep`: what the worker must do now (each action is reported once).

Two policies, because the check runs behind generation:

- HOLD_BACK: text reaches the wire only once every window covering it was released, so unsafe
  text never reaches the user. A window left without a verdict past `deadline_ms` fails the
  turn closed (`safety_timeout`): without a verdict nothing more can be shown safely. The price
  is latency (each chunk waits for its window to fill and be judged), recorded as hold time.
- OPTIMISTIC: text is relayed at once and the check trails it; a cut stops generation and says
  how much the client must retract. After generation the gate waits at most `deadline_ms` for
  outstanding verdicts, then gives up and marks the turn unaudited, so a slow or dead safety
  worker never blocks an answer. It trades the guarantee above for latency.

Any action other than an explicit `release` cuts (fail closed). Verdicts may arrive out of
order; unknown, duplicate and late ones are ignored. Pure: no I/O, no clock (`now_ms` is
passed in).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from moderation.verdict import Action
from moderation.windows import Window, Windower

SAFETY_TIMEOUT = "safety_timeout"


class Policy(StrEnum):
    OPTIMISTIC = "optimistic"
    HOLD_BACK = "hold_back"


def tier_policies(spec: str) -> dict[str, str]:
    """`free=hold_back,enterprise=optimistic` → {tier: policy}; policies are those of
    `Policy` or `off`. Raises ValueError naming the bad part."""
    policies: dict[str, str] = {}
    allowed = {*(p.value for p in Policy), "off"}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        tier, sep, policy = part.partition("=")
        tier, policy = tier.strip(), policy.strip()
        if not sep or not tier or policy not in allowed:
            raise ValueError(f"{part!r}: expected tier=policy with policy in {sorted(allowed)}")
        policies[tier] = policy
    return policies


@dataclass(frozen=True, slots=True)
class GateConfig:
    policy: Policy = Policy.HOLD_BACK
    window_tokens: int = 50
    overlap_tokens: int = 10
    deadline_ms: float = 2000.0
    first_window_tokens: int | None = None  # None: as `window_tokens`


@dataclass(frozen=True, slots=True)
class CutInfo:
    window_index: int
    shown_chars: int  # characters that had reached the user: what the client retracts


@dataclass(frozen=True, slots=True)
class GateStep:
    relay: str = ""  # text to append to what the user was shown
    windows: list[Window] = field(default_factory=list)  # to send to the safety worker
    cut: CutInfo | None = None  # stop generation and retract
    failed: str | None = None  # stop generation and fail the turn (fail closed)
    done: bool = False  # generation over and no verdict awaited: send the final event


@dataclass(frozen=True, slots=True)
class GateSummary:
    """The numbers the trace records for a turn."""

    windows_sent: int
    windows_released: int  # release verdicts received
    cut_window: int | None
    failed: str | None
    unaudited: bool  # optimistic: gave up waiting for some verdict
    max_hold_ms: float  # hold-back: longest a chunk waited before relay (0 when optimistic)
    mean_hold_ms: float
    verdict_latency_ms: list[float]  # window sent -> verdict, by window index (answered only)


class OutputGate:
    def __init__(self, config: GateConfig) -> None:
        if config.deadline_ms <= 0:
            raise ValueError("deadline_ms must be > 0")
        self.config = config
        self._windower = Windower(
            config.window_tokens, config.overlap_tokens, first_size=config.first_window_tokens
        )
        self._ends: list[int] = []  # end_char of each sent window, by index
        self._pending: dict[int, float] = {}  # sent_ms of windows awaiting a verdict
        self._released: set[int] = set()
        self._latency_ms: dict[int, float] = {}
        self._last_sent_ms = 0.0
        self._released_prefix = 0  # hold-back: windows 0..n-1 are all released
        self._held = ""  # hold-back: text from `shown_chars` on, not yet relayed
        self._arrivals: deque[tuple[int, float]] = deque()  # (end_char, arrived_ms) held
        self._hold_ms: list[float] = []
        self.shown_chars = 0
        self.finished = False  # generation has ended
        self.done = False
        self.cut_window: int | None = None
        self.failed: str | None = None
        self.unaudited = False

    @property
    def closed(self) -> bool:
        """Nothing more will be relayed or sent: done, cut or failed."""
        return self.done or self.cut_window is not None or self.failed is not None

    def on_delta(self, text: str, tokens: int, now_ms: float) -> GateStep:
        if self.closed:  # generation may run on briefly after a cut or a failure
            return GateStep()
        windows = self._send(self._windower.push(text, tokens), now_ms)
        if self.config.policy is Policy.OPTIMISTIC:
            self.shown_chars += len(text)
            return self._step(now_ms, relay=text, windows=windows)
        if text:
            self._held += text
            self._arrivals.append((self._windower.chars, now_ms))
        return self._step(now_ms, windows=windows)

    def on_verdict(self, window_index: int, action: Action, now_ms: float) -> GateStep:
        if self.closed or window_index not in self._pending:  # late, unknown or duplicate
            return GateStep()
        self._latency_ms[window_index] = now_ms - self._pending.pop(window_index)
        if action != Action.RELEASE:
            self.cut_window = window_index
            return GateStep(cut=CutInfo(window_index, self.shown_chars))
        self._released.add(window_index)
        return self._step(now_ms)

    def on_finish(self, now_ms: float) -> GateStep:
        if self.finished:
            raise RuntimeError("finish called twice")
        self.finished = True
        if self.closed:
            return GateStep()
        last = self._windower.finish()
        return self._step(now_ms, windows=self._send([last] if last else [], now_ms))

    def on_tick(self, now_ms: float) -> GateStep:
        return GateStep() if self.closed else self._step(now_ms)

    def summary(self) -> GateSummary:
        holds = self._hold_ms
        return GateSummary(
            windows_sent=len(self._ends),
            windows_released=len(self._released),
            cut_window=self.cut_window,
            failed=self.failed,
            unaudited=self.unaudited,
            max_hold_ms=max(holds, default=0.0),
            mean_hold_ms=sum(holds) / len(holds) if holds else 0.0,
            verdict_latency_ms=[self._latency_ms[i] for i in sorted(self._latency_ms)],
        )

    def _send(self, windows: list[Window], now_ms: float) -> list[Window]:
        for window in windows:
            self._ends.append(window.end_char)
            self._pending[window.index] = now_ms
            self._last_sent_ms = now_ms
        return windows

    def _step(
        self, now_ms: float, *, relay: str = "", windows: list[Window] | None = None
    ) -> GateStep:
        """Relay what became releasable, then apply the deadline and settle `done`."""
        windows = windows or []
        deadline = self.config.deadline_ms
        if self.config.policy is Policy.HOLD_BACK:
            relay += self._release(now_ms)
            oldest_sent_ms = next(iter(self._pending.values()), now_ms)  # sent in order
            if now_ms - oldest_sent_ms > deadline:
                self.failed = SAFETY_TIMEOUT
                return GateStep(relay=relay, windows=windows, failed=SAFETY_TIMEOUT)
        elif self.finished and self._pending and now_ms - self._last_sent_ms > deadline:
            self.unaudited = True
        if self.finished and (not self._pending or self.unaudited):
            self.done = True
        return GateStep(relay=relay, windows=windows, done=self.done)

    def _release(self, now_ms: float) -> str:
        """Hold-back: the text up to the end of the longest prefix of released windows."""
        while self._released_prefix in self._released:
            self._released_prefix += 1
        end = self._ends[self._released_prefix - 1] if self._released_prefix else 0
        if end <= self.shown_chars:
            return ""
        cut_at = end - self.shown_chars
        relay, self._held = self._held[:cut_at], self._held[cut_at:]
        self.shown_chars = end
        while self._arrivals and self._arrivals[0][0] <= end:
            self._hold_ms.append(now_ms - self._arrivals.popleft()[1])
        return relay
