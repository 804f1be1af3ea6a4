"""A replay's plan: conversations in order, ids derived from the run, the candidate's
decoding, recorded pacing, and a namespace that is never the live one."""

import pytest

from harness.factories import completed, submitted
from producers.replay.__main__ import candidate_env
from producers.replay.plan import (
    PlanError,
    check_namespace,
    decoding_for,
    from_eval_items,
    from_recorded,
    pace_offsets_s,
    replay_conversation_id,
    replay_turn_id,
    submitted_for,
)
from producers.times import TimeError, parse_time_ms
from schemas.events import DecodingParams
from schemas.flywheel import Candidate, EvalItem, ItemTurn, SetKind
from schemas.traces import build_trace


def test_eval_items_become_conversations_whose_last_turn_is_scored():
    item = EvalItem(
        item_id="i1",
        kind=SetKind.GOLDEN,
        turns=[ItemTurn(text="My name is Ann."), ItemTurn(text="What is my name?")],
        reference="Ann",
    )
    [conversation] = from_eval_items([item])
    assert [t.text for t in conversation.turns] == ["My name is Ann.", "What is my name?"]
    assert [t.scored for t in conversation.turns] == [False, True]
    assert [t.source_id for t in conversation.turns] == ["i1#0", "i1#1"]
    with pytest.raises(PlanError):
        from_eval_items([EvalItem(item_id="empty", kind=SetKind.GOLDEN, turns=[])])


def test_recorded_turns_group_by_conversation_in_order_once_each():
    turns = [
        submitted("b2", conversation_id="c2", submitted_at_ms=40.0, tenant_id="acme"),
        submitted("a2", conversation_id="c1", submitted_at_ms=30.0, tenant_id="acme"),
        submitted("a1", conversation_id="c1", submitted_at_ms=10.0, tenant_id="acme"),
        submitted("a1", conversation_id="c1", submitted_at_ms=10.0, tenant_id="acme"),  # retry
        submitted("x1", conversation_id="c3", submitted_at_ms=20.0, tenant_id="other"),
        submitted("r1", conversation_id="c4", submitted_at_ms=25.0, run_id="old-run"),
    ]
    plan = from_recorded(turns, tenant="acme")
    assert [(c.conversation_id, [t.source_id for t in c.turns]) for c in plan] == [
        ("c1", ["a1", "a2"]),
        ("c2", ["b2"]),
    ]  # other tenants and earlier replays are left out
    assert [len(c.turns) for c in from_recorded(turns, max_turns=2)] == [2]
    assert pace_offsets_s(plan) == {"c1": 0.0, "c2": 0.03}


def test_ids_are_the_runs_own_and_stable():
    assert replay_turn_id("run1", "t1") == replay_turn_id("run1", "t1")
    assert replay_turn_id("run1", "t1") != replay_turn_id("run2", "t1")
    conversation = replay_conversation_id("a-very-long-run-id-that-goes-on-and-on", "c" * 64)
    assert len(conversation) <= 64 and conversation.startswith("r-a-very-long-run-id")


def test_the_candidate_sets_decoding_pool_and_run():
    candidate = Candidate(name="terse", max_tokens=64, seed=7, pool="reasoning")
    assert decoding_for(DecodingParams(max_tokens=256, temperature=0.7), candidate) == (
        DecodingParams(max_tokens=64, temperature=0.0, seed=7)
    )  # temperature 0 unless the candidate asks: reruns compare like with like
    [conversation] = from_recorded([submitted("t1", conversation_id="c1", text="hi")])
    event = submitted_for(
        conversation.turns[0], "c1", run_id="run1", candidate=candidate, edge_id="e", now_ms=5.0
    )
    assert (event.run_id, event.pool, event.text, event.client) == (
        "run1",
        "reasoning",
        "hi",
        "replay/terse",
    )
    assert event.turn_id == replay_turn_id("run1", "t1")
    assert build_trace(event, completed=completed(event.turn_id)).run_id == "run1"  # traced


def test_candidate_settings_for_the_roles():
    candidate = Candidate(name="c", system_prompt="Be brief.", safety_output_policy="hold_back")
    assert candidate_env(candidate) == {
        "TURNSTREAM_SYSTEM_PROMPT": "Be brief.",
        "TURNSTREAM_SAFETY_OUTPUT_POLICY": "hold_back",
    }


@pytest.mark.parametrize("namespace", ["", "live", "test-123"])
def test_a_replay_never_runs_in_the_live_namespace(namespace):
    with pytest.raises(PlanError):
        check_namespace(namespace, "live")
    check_namespace("replay-run1", "live")


def test_times_parse():
    assert parse_time_ms("2h", 10_000_000.0) == 10_000_000.0 - 7_200_000
    assert parse_time_ms("1732950000000", 0) == 1732950000000.0
    assert parse_time_ms("1970-01-01T00:00:01", 0) == 1000.0
    with pytest.raises(TimeError):
        parse_time_ms("yesterday", 0)
