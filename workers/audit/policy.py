"""From audit results to blacklist and alert decisions: thresholds, pure, no I/O.

One unsafe turn is often a false positive or a one-off; a user who keeps producing unsafe
exchanges is not. A `BlacklistRule` fires when a user has `count` unsafe turns in the rule's
categories within `window_s` seconds, and asks for that user to be blacklisted for `ttl_s`
(the caller writes it to the live blacklist); it does not fire again for that user while the
requested TTL runs. Alerts are raised for any turn in an `alert_categories` code (S4 by
default, one is enough), and when the unsafe share of the last `rate_window` audited turns
exceeds `rate_threshold` (with a cooldown so an incident raises one alert, not hundreds).

Memory is bounded: per-user state exists only for users with unsafe turns, and at most
`max_users` of them are kept (the least recently flagged is forgotten first).

Results the guard failed on never reach here: the caller records the error instead, so a
crashing model cannot blacklist anyone. Time is passed in (`at_ms`), so replays are exact.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BlacklistRule:
    name: str
    count: int
    window_s: float
    ttl_s: float
    categories: frozenset[str] | None = None  # None: any unsafe turn counts


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    rules: tuple[BlacklistRule, ...] = (
        BlacklistRule("repeat_unsafe", count=3, window_s=600, ttl_s=3600),
        BlacklistRule(
            "repeat_severe", count=2, window_s=3600, ttl_s=86400, categories=frozenset({"S1"})
        ),
    )
    alert_categories: frozenset[str] = frozenset({"S4"})
    rate_window: int = 200
    rate_min_samples: int = 50
    rate_threshold: float = 0.2
    rate_cooldown_s: float = 600
    max_users: int = 100_000


@dataclass(frozen=True, slots=True)
class BlacklistDecision:
    tenant: str
    user_id: str
    ttl_s: float
    rule: str
    categories: tuple[str, ...]
    at_ms: int


@dataclass(frozen=True, slots=True)
class AlertDecision:
    kind: str  # "category" or "unsafe_rate"
    tenant: str
    user_id: str
    categories: tuple[str, ...]
    at_ms: int
    detail: str = ""


Decision = BlacklistDecision | AlertDecision


@dataclass(slots=True)
class _UserState:
    unsafe: deque[tuple[int, frozenset[str]]] = field(default_factory=deque)
    blocked_until_ms: dict[str, int] = field(default_factory=dict)


class AuditPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._users: dict[tuple[str, str], _UserState] = {}
        self._recent: deque[bool] = deque(maxlen=self.config.rate_window)
        self._rate_alert_until_ms = -1
        windows = [rule.window_s for rule in self.config.rules]
        self._horizon_ms = int(max(windows, default=0) * 1000)

    def observe(
        self,
        tenant: str,
        user_id: str,
        unsafe: bool,
        categories: tuple[str, ...],
        at_ms: int,
    ) -> list[Decision]:
        """Feed one audited turn; return the decisions it triggers (often none)."""
        decisions: list[Decision] = []
        self._recent.append(unsafe)
        if unsafe:
            decisions.extend(self._user_decisions(tenant, user_id, categories, at_ms))
            hit = tuple(c for c in categories if c in self.config.alert_categories)
            if hit:
                decisions.append(AlertDecision("category", tenant, user_id, hit, at_ms))
        rate = self._rate_alert(tenant, user_id, at_ms)
        if rate is not None:
            decisions.append(rate)
        return decisions

    def _user_decisions(
        self, tenant: str, user_id: str, categories: tuple[str, ...], at_ms: int
    ) -> list[Decision]:
        key = (tenant, user_id)
        state = self._users.pop(key, None) or _UserState()
        self._users[key] = state  # most recently flagged last
        while len(self._users) > self.config.max_users:
            del self._users[next(iter(self._users))]
        state.unsafe.append((at_ms, frozenset(categories)))
        while state.unsafe and state.unsafe[0][0] < at_ms - self._horizon_ms:
            state.unsafe.popleft()
        out: list[Decision] = []
        for rule in self.config.rules:
            if at_ms < state.blocked_until_ms.get(rule.name, -1):
                continue
            since = at_ms - int(rule.window_s * 1000)
            hits = [
                cats
                for t, cats in state.unsafe
                if t >= since and (rule.categories is None or cats & rule.categories)
            ]
            if len(hits) < rule.count:
                continue
            state.blocked_until_ms[rule.name] = at_ms + int(rule.ttl_s * 1000)
            seen = sorted(set().union(*hits), key=lambda c: (len(c), c))
            out.append(
                BlacklistDecision(tenant, user_id, rule.ttl_s, rule.name, tuple(seen), at_ms)
            )
        return out

    @property
    def tracked_users(self) -> int:
        return len(self._users)

    def _rate_alert(self, tenant: str, user_id: str, at_ms: int) -> AlertDecision | None:
        cfg = self.config
        n = len(self._recent)
        if n < cfg.rate_min_samples or at_ms < self._rate_alert_until_ms:
            return None
        share = sum(self._recent) / n
        if share <= cfg.rate_threshold:
            return None
        self._rate_alert_until_ms = at_ms + int(cfg.rate_cooldown_s * 1000)
        detail = f"unsafe share {share:.2f} over last {n} turns > {cfg.rate_threshold:.2f}"
        return AlertDecision("unsafe_rate", tenant, user_id, (), at_ms, detail)
