"""Blacklist thresholds and alerts from audit results."""

from __future__ import annotations

from workers.audit.policy import (
    AlertDecision,
    AuditPolicy,
    BlacklistDecision,
    BlacklistRule,
    PolicyConfig,
)

S = 1000  # ms


def only_rule(**kw: object) -> PolicyConfig:
    rule = BlacklistRule("r", **kw)  # type: ignore[arg-type]
    return PolicyConfig(rules=(rule,), rate_min_samples=10_000)


def test_n_unsafe_within_window_blacklists_once_per_ttl() -> None:
    p = AuditPolicy(only_rule(count=3, window_s=60, ttl_s=300))
    assert p.observe("a", "u", True, ("S2",), 0) == []
    assert p.observe("a", "u", False, (), 5 * S) == []
    assert p.observe("a", "u", True, ("S10",), 10 * S) == []
    out = p.observe("a", "u", True, ("S2",), 20 * S)
    assert out == [BlacklistDecision("a", "u", 300, "r", ("S2", "S10"), 20 * S)]
    assert p.observe("a", "u", True, ("S2",), 30 * S) == []  # still within the TTL
    assert len(p.observe("a", "u", True, ("S2",), 330 * S)) == 0  # older hits left the window
    p.observe("a", "u", True, ("S2",), 340 * S)
    assert len(p.observe("a", "u", True, ("S2",), 350 * S)) == 1


def test_hits_outside_the_window_do_not_count() -> None:
    p = AuditPolicy(only_rule(count=2, window_s=60, ttl_s=300))
    p.observe("a", "u", True, ("S1",), 0)
    assert p.observe("a", "u", True, ("S1",), 61 * S) == []


def test_users_and_tenants_are_separate() -> None:
    p = AuditPolicy(only_rule(count=2, window_s=60, ttl_s=300))
    p.observe("a", "u", True, ("S1",), 0)
    assert p.observe("a", "v", True, ("S1",), S) == []
    assert p.observe("b", "u", True, ("S1",), S) == []
    assert len(p.observe("a", "u", True, ("S1",), 2 * S)) == 1


def test_category_rule_ignores_other_categories() -> None:
    p = AuditPolicy(only_rule(count=2, window_s=60, ttl_s=60, categories=frozenset({"S1"})))
    p.observe("a", "u", True, ("S12",), 0)
    assert p.observe("a", "u", True, ("S10",), S) == []
    p.observe("a", "u", True, ("S1", "S10"), 2 * S)
    out = p.observe("a", "u", True, ("S1",), 3 * S)
    assert [d.rule for d in out if isinstance(d, BlacklistDecision)] == ["r"]


def test_any_s4_raises_an_alert() -> None:
    p = AuditPolicy(PolicyConfig(rate_min_samples=10_000))
    out = p.observe("a", "u", True, ("S4", "S12"), 0)
    assert out == [AlertDecision("category", "a", "u", ("S4",), 0)]
    assert p.observe("a", "u", True, ("S12",), S) == []


def test_unsafe_rate_alert_with_cooldown() -> None:
    cfg = PolicyConfig(
        rules=(),
        rate_window=10,
        rate_min_samples=10,
        rate_threshold=0.3,
        rate_cooldown_s=60,
    )
    p = AuditPolicy(cfg)
    for i in range(7):
        assert p.observe("a", f"u{i}", False, (), i * S) == []
    assert p.observe("a", "x", True, ("S2",), 7 * S) == []
    assert p.observe("a", "y", True, ("S2",), 8 * S) == []
    out = p.observe("a", "z", True, ("S2",), 9 * S)  # 3/10 is not > 0.3
    assert out == []
    out = p.observe("a", "w", True, ("S2",), 10 * S)  # 4/10
    assert len(out) == 1 and out[0].kind == "unsafe_rate"  # type: ignore[union-attr]
    assert p.observe("a", "w", True, ("S2",), 20 * S) == []  # cooldown
    assert len(p.observe("a", "w", True, ("S2",), 71 * S)) == 1


def test_default_config_blacklists_repeat_violent_crime() -> None:
    p = AuditPolicy()
    p.observe("a", "u", True, ("S1",), 0)
    out = p.observe("a", "u", True, ("S1",), S)
    assert [d.rule for d in out if isinstance(d, BlacklistDecision)] == ["repeat_severe"]


def test_per_user_state_is_bounded_and_forgets_the_least_recently_flagged() -> None:
    rule = BlacklistRule("r", count=2, window_s=600, ttl_s=60)
    p = AuditPolicy(PolicyConfig(rules=(rule,), rate_min_samples=10_000, max_users=2))
    assert p.observe("a", "old", True, ("S1",), 0) == []
    p.observe("a", "x", True, ("S1",), S)
    p.observe("a", "y", True, ("S1",), 2 * S)  # "old" is forgotten, not "x"
    assert p.tracked_users == 2
    assert p.observe("a", "old", True, ("S1",), 3 * S) == []  # its first hit was forgotten
    assert len(p.observe("a", "y", True, ("S1",), 4 * S)) == 1  # "y" was kept
    for i in range(1000):
        p.observe("a", f"u{i}", True, ("S1",), 5 * S)
    assert p.tracked_users == 2
