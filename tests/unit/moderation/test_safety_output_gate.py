"""Output gate: optimistic and hold-back relaying, cuts, deadlines, summary numbers."""

from __future__ import annotations

import itertools

import pytest

from moderation.output_gate import (
    SAFETY_TIMEOUT,
    CutInfo,
    GateConfig,
    GateStep,
    OutputGate,
    Policy,
)
from moderation.verdict import Action

WORDS = [f"w{i} " for i in range(8)]  # 3 chars each; windows of 3 tokens, overlap 1
ANSWER = "".join(WORDS)
RELEASE, CUT = Action.RELEASE, Action.CUT


def make(policy: Policy, size: int = 3, overlap: int = 1, deadline: float = 100.0) -> OutputGate:
    return OutputGate(GateConfig(policy, size, overlap, deadline))


def feed(gate: OutputGate, words: list[str], now: float = 0.0) -> list[GateStep]:
    return [gate.on_delta(word, 1, now) for word in words]


def relayed(steps: list[GateStep]) -> str:
    return "".join(step.relay for step in steps)


def sent(steps: list[GateStep]) -> list[int]:
    return [w.index for step in steps for w in step.windows]


# --- optimistic -----------------------------------------------------------------------------


def test_optimistic_relays_at_once_and_sends_windows_as_they_fill():
    gate = make(Policy.OPTIMISTIC)
    steps = feed(gate, WORDS)
    assert [s.relay for s in steps] == WORDS
    assert sent(steps) == [0, 1]
    assert [w.text for s in steps for w in s.windows] == ["w0 w1 w2 ", "w2 w3 w4 w5 "]
    finish = gate.on_finish(10)
    assert [w.text for w in finish.windows] == ["w5 w6 w7 "] and finish.windows[0].final
    assert not finish.done
    assert gate.on_verdict(2, RELEASE, 11) == GateStep()  # 0 and 1 still out
    gate.on_verdict(0, RELEASE, 12)
    assert gate.on_verdict(1, RELEASE, 13) == GateStep(done=True)
    assert gate.closed and not gate.unaudited


def test_optimistic_cut_midway_retracts_everything_shown_and_ignores_the_rest():
    gate = make(Policy.OPTIMISTIC)
    before = feed(gate, WORDS[:5])
    step = gate.on_verdict(0, CUT, 5)
    assert step == GateStep(cut=CutInfo(window_index=0, shown_chars=15))
    assert relayed(before) == ANSWER[:15]
    after = feed(gate, WORDS[5:])  # generation had not stopped yet
    assert relayed(after) == "" and sent(after) == []
    assert gate.on_verdict(0, RELEASE, 6) == GateStep()
    assert gate.on_finish(7) == GateStep()
    assert gate.on_tick(10_000) == GateStep()
    assert gate.summary().cut_window == 0 and gate.shown_chars == 15


def test_optimistic_cut_after_finish_still_cuts():
    gate = make(Policy.OPTIMISTIC)
    feed(gate, WORDS)
    gate.on_finish(0)
    assert gate.on_verdict(1, CUT, 5).cut == CutInfo(1, len(ANSWER))
    assert not gate.done


def test_optimistic_never_waits_before_finish():
    gate = make(Policy.OPTIMISTIC, deadline=100)
    feed(gate, WORDS[:3], now=0)
    assert gate.on_tick(10_000) == GateStep()
    assert gate.on_delta("w3 ", 1, 10_001).relay == "w3 "


def test_optimistic_gives_up_after_the_deadline_from_the_last_window_and_is_unaudited():
    gate = make(Policy.OPTIMISTIC, deadline=100)
    feed(gate, WORDS[:3], now=0)  # window 0 sent at 0
    feed(gate, WORDS[3:], now=50)  # window 1 sent at 50
    gate.on_finish(60)  # final window sent at 60
    gate.on_verdict(0, RELEASE, 70)
    assert gate.on_tick(160) == GateStep()  # exactly at the deadline: still waiting
    step = gate.on_tick(161)
    assert step == GateStep(done=True) and step.failed is None
    assert gate.unaudited and gate.summary().unaudited
    assert gate.on_verdict(1, CUT, 170) == GateStep()  # too late: the turn is over


# --- hold-back ------------------------------------------------------------------------------


def test_hold_back_relays_only_released_prefixes_with_out_of_order_verdicts():
    gate = make(Policy.HOLD_BACK)
    assert relayed(feed(gate, WORDS)) == ""
    finish = gate.on_finish(0)
    assert [w.index for w in finish.windows] == [2] and finish.relay == ""
    assert gate.on_verdict(1, RELEASE, 1) == GateStep()  # window 0 still pending
    assert gate.on_verdict(0, RELEASE, 2) == GateStep(relay=ANSWER[:18])  # windows 0 and 1
    assert gate.on_verdict(2, RELEASE, 3) == GateStep(relay=ANSWER[18:], done=True)
    assert gate.shown_chars == len(ANSWER)


def test_hold_back_relays_each_window_as_it_is_released_mid_stream():
    gate = make(Policy.HOLD_BACK)
    feed(gate, WORDS[:4])
    assert gate.on_verdict(0, RELEASE, 1).relay == "w0 w1 w2 "
    assert gate.on_delta("w4 ", 1, 2).relay == ""  # not yet in a released window


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_hold_back_relays_the_whole_answer_once_in_order_whatever_the_verdict_order(order):
    gate = make(Policy.HOLD_BACK)
    steps = feed(gate, WORDS)
    steps.append(gate.on_finish(0))
    shown = ""
    for index in order:
        step = gate.on_verdict(index, RELEASE, 1)
        shown += step.relay
        assert ANSWER.startswith(shown) and len(shown) == gate.shown_chars
    assert shown == ANSWER and gate.done


def test_hold_back_cut_never_shows_unreleased_text():
    gate = make(Policy.HOLD_BACK)
    feed(gate, WORDS)
    gate.on_finish(0)
    shown = gate.on_verdict(0, RELEASE, 1).relay
    shown += gate.on_verdict(2, RELEASE, 2).relay  # window 1 still pending
    step = gate.on_verdict(1, CUT, 3)
    assert step == GateStep(cut=CutInfo(window_index=1, shown_chars=9))
    assert shown == "w0 w1 w2 "
    assert gate.on_tick(10_000) == GateStep()
    summary = gate.summary()
    assert summary.cut_window == 1 and summary.windows_released == 2


def test_anything_but_release_cuts():
    gate = make(Policy.HOLD_BACK)
    feed(gate, WORDS[:3])
    assert gate.on_verdict(0, Action.BLOCK, 1).cut == CutInfo(0, 0)


@pytest.mark.parametrize(("overlap", "caught"), [(3, True), (0, False)])
def test_phrase_split_across_two_windows_is_judged_whole_thanks_to_the_overlap(overlap, caught):
    tokens = ["Sure", ",", " here", " is", " how", " to", " build", " a", " pipe", " bomb", "."]
    gate = make(Policy.HOLD_BACK, size=9, overlap=overlap)
    windows = [w for step in feed(gate, tokens) for w in step.windows]
    windows += gate.on_finish(0).windows
    assert "pipe bomb" not in windows[0].text  # the boundary falls inside the phrase
    shown, cut = "", None
    for window in windows:  # a classifier that only sees one window at a time
        action = CUT if "pipe bomb" in window.text else RELEASE
        step = gate.on_verdict(window.index, action, 1)
        shown, cut = shown + step.relay, cut or step.cut
    assert (cut is not None) is caught
    assert ("bomb" in shown) is not caught
    if caught:
        assert cut == CutInfo(window_index=1, shown_chars=len(shown))


def test_hold_back_fails_closed_when_a_verdict_is_late():
    gate = make(Policy.HOLD_BACK, deadline=100)
    feed(gate, WORDS[:3], now=0)  # window 0 sent at 0
    assert gate.on_tick(100) == GateStep()  # exactly at the deadline: still waiting
    assert gate.on_tick(101) == GateStep(failed=SAFETY_TIMEOUT)
    assert gate.failed == SAFETY_TIMEOUT and gate.closed
    assert gate.on_verdict(0, RELEASE, 102) == GateStep()  # too late: nothing more shown
    assert feed(gate, WORDS[3:], now=103) == [GateStep()] * 5
    assert gate.on_finish(104) == GateStep() and gate.shown_chars == 0


def test_hold_back_deadline_counts_from_each_windows_own_send_time():
    gate = make(Policy.HOLD_BACK, deadline=100)
    feed(gate, WORDS[:3], now=0)
    feed(gate, WORDS[3:6], now=80)  # window 1 sent at 80
    assert gate.on_verdict(0, RELEASE, 90).relay == "w0 w1 w2 "
    assert gate.on_tick(180) == GateStep()
    step = gate.on_delta("w6 ", 1, 181)  # any call notices the deadline
    assert step.failed == SAFETY_TIMEOUT and step.relay == ""


# --- both policies --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(Policy))
def test_empty_answer_is_done_at_once(policy):
    gate = make(policy)
    assert gate.on_delta("", 2, 0) == GateStep()  # tokens without text
    assert gate.on_finish(1) == GateStep(done=True)
    assert gate.summary().windows_sent == 0


@pytest.mark.parametrize("policy", list(Policy))
def test_duplicate_and_unknown_verdicts_are_ignored(policy):
    gate = make(policy)
    feed(gate, WORDS[:6])
    assert gate.on_verdict(0, RELEASE, 10).cut is None
    assert gate.on_verdict(0, RELEASE, 20) == GateStep()
    assert gate.on_verdict(0, CUT, 30) == GateStep()  # a verdict is final
    assert gate.on_verdict(7, CUT, 30) == GateStep()  # never sent
    assert gate.on_verdict(-1, CUT, 30) == GateStep()
    assert gate.cut_window is None
    summary = gate.summary()
    assert summary.windows_released == 1 and summary.verdict_latency_ms == [10]


def test_final_partial_window_is_held_until_released():
    gate = make(Policy.HOLD_BACK)
    feed(gate, WORDS[:4])  # window 0 = w0..w2; "w3 " is left over
    gate.on_verdict(0, RELEASE, 1)
    finish = gate.on_finish(2)
    (last,) = finish.windows
    assert last.final and last.text == "w2 w3 " and last.new_start == 9
    assert finish.relay == "" and not finish.done
    assert gate.on_verdict(1, RELEASE, 3) == GateStep(relay="w3 ", done=True)


def test_finish_on_a_window_boundary_sends_no_window_and_is_done_when_all_released():
    gate = make(Policy.HOLD_BACK)
    feed(gate, WORDS[:3])
    gate.on_verdict(0, RELEASE, 1)
    assert gate.on_finish(2) == GateStep(done=True)


def test_summary_numbers():
    gate = make(Policy.HOLD_BACK, deadline=1_000)
    for t, word in enumerate(WORDS[:6]):  # deltas arrive at 0..5 ms
        gate.on_delta(word, 1, t)  # window 0 sent at 2, window 1 at 5
    gate.on_verdict(1, RELEASE, 15)
    gate.on_verdict(0, RELEASE, 20)  # releases all six deltas at 20
    gate.on_finish(21)
    summary = gate.summary()
    assert summary.windows_sent == 2 and summary.windows_released == 2
    assert summary.cut_window is None and summary.failed is None and not summary.unaudited
    assert summary.verdict_latency_ms == [18, 10]  # by window index
    assert summary.max_hold_ms == 20
    assert summary.mean_hold_ms == pytest.approx(sum(20 - t for t in range(6)) / 6)
    assert gate.done


def test_optimistic_has_no_hold_cost():
    gate = make(Policy.OPTIMISTIC)
    feed(gate, WORDS)
    gate.on_finish(0)
    summary = gate.summary()
    assert summary.max_hold_ms == 0 and summary.mean_hold_ms == 0
    assert summary.windows_sent == 3 and summary.windows_released == 0


def test_misuse_raises():
    with pytest.raises(ValueError):
        make(Policy.HOLD_BACK, deadline=0)
    with pytest.raises(ValueError):
        make(Policy.HOLD_BACK, size=3, overlap=3)
    gate = make(Policy.OPTIMISTIC)
    gate.on_finish(0)
    with pytest.raises(RuntimeError):
        gate.on_finish(1)


def test_per_tier_policies_are_parsed_strictly():
    from moderation.output_gate import tier_policies

    assert tier_policies("free=hold_back, enterprise=optimistic,plus=off") == {
        "free": "hold_back",
        "enterprise": "optimistic",
        "plus": "off",
    }
    assert tier_policies("") == {}
    for bad in ("free", "free=fast", "=hold_back"):
        with pytest.raises(ValueError):
            tier_policies(bad)


def test_a_turn_gets_its_tiers_policy_or_the_default():
    from workers.inference.service import ServiceConfig

    default, strict = GateConfig(policy=Policy.OPTIMISTIC), GateConfig(policy=Policy.HOLD_BACK)
    config = ServiceConfig(
        worker_id="w", output_gate=default, tier_gates={"free": strict, "enterprise": None}
    )
    assert config.gate_for("free") is strict
    assert config.gate_for("enterprise") is None  # off for that tier
    assert config.gate_for("plus") is default and config.gate_for("") is default
