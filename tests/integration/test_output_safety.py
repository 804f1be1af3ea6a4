"""The incremental output check on the real pipeline (Kafka, Redis, the safety worker, the
fake engine, which echoes the question): an unsafe answer is cut within a window, the
engine aborts, the client gets the canned reply in place of what it saw and the history
keeps that reply; hold-back never lets the unsafe text out; a dead safety worker makes
hold-back fail closed and optimistic go on; the audit reads again only the answers the
windows did not release."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt, records_so_far, turn_event
from harness.stack import pipeline
from runtime.settings import Settings
from schemas.codec import decode
from schemas.events import (
    FinishReason,
    Role,
    SafetyAction,
    SafetyStage,
    SafetyVerdict,
    TraceRecorded,
    TurnCompleted,
)
from workers.audit.app import run_auditor
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient
from ws_edge.messages import ResponseDelta, ResponseDone, ResponseRetracted

pytestmark = pytest.mark.integration

SECRET = "sk-proj-" + "A1b2C3d4" * 5  # an API key: the output rules cut it, the input passes
FILLER = " ".join(f"word{i}" for i in range(300))  # a long answer after the secret


def settings_for(services: Settings, policy: str, **more) -> Settings:
    return Settings.from_env(
        namespace=f"outsafe-{policy}-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        safety_output_policy=policy,
        safety_window_tokens=20,
        safety_window_overlap=5,
        **more,
    )


@contextlib.asynccontextmanager
async def stack(services: Settings, policy: str, *, with_safety: bool = True, **more):
    engine = FakeEngine(token_interval_s=0.01)
    settings = settings_for(services, policy, **more)
    async with (
        pipeline(settings, engine, with_safety=with_safety) as running,
        EdgeClient.connect(running.url, running.token()) as client,
    ):
        yield running, engine, client


async def answer(client: EdgeClient, conversation: str, text: str):
    turn_id = await client.start_turn(conversation, text)
    events = [e async for e in client.events(turn_id)]
    deltas = [e.text for e in events if isinstance(e, ResponseDelta)]
    done = events[-1]
    assert isinstance(done, ResponseDone)
    retracted = [e for e in events if isinstance(e, ResponseRetracted)]
    if done.error is not None and done.error.code == "output_cut":  # retract, then done
        assert retracted == [events[-2]] and retracted[0].text == done.text
        assert retracted[0].shown_chars == len("".join(deltas))
    else:
        assert retracted == []
    return turn_id, "".join(deltas), done


async def test_optimistic_cuts_an_unsafe_answer_within_a_window(services):
    async with stack(services, "optimistic") as (p, engine, client):
        conversation = conv()
        turn_id, shown, done = await answer(client, conversation, f"keep {SECRET} {FILLER}")
        _, _, after = await answer(client, conversation, "what did you say?")
        settings = p.settings
    assert done.finish_reason == FinishReason.SAFETY
    assert done.error is not None and done.error.code == "output_cut"
    assert SECRET not in done.text and "secret" in done.text  # the canned reply replaces it
    assert SECRET in shown  # optimistic: it was on screen until the cut retracted it
    # the key is in window 0 or 1 (20 tokens each): generation stops within the next one
    assert turn_id in engine.aborted and done.usage.completion_tokens <= 4 * 20
    prompt = await assembled_prompt(settings, after.turn_id)
    answers = [m.content for m in prompt.messages if m.role == Role.ASSISTANT]
    assert answers == [done.text]  # the history keeps the canned reply, not the answer
    completed = await turn_event(settings, "turns.completed", turn_id)
    assert isinstance(completed, TurnCompleted)
    *released, verdict = completed.verdicts  # every window's verdict rides on the completion
    assert [v.window for v in completed.verdicts] == list(range(len(completed.verdicts)))
    assert all(v.action == SafetyAction.RELEASE for v in released)
    assert isinstance(verdict, SafetyVerdict) and verdict.stage == SafetyStage.OUTPUT
    assert verdict.action == SafetyAction.CUT and "secret_leak" in verdict.labels
    assert SECRET in verdict.text  # the offending window, kept as evidence


async def test_hold_back_never_shows_unsafe_text_and_streams_safe_answers(services):
    async with stack(services, "hold_back") as (_, engine, client):
        cut_id, shown, cut = await answer(client, conv(), f"{FILLER[:200]} {SECRET} {FILLER}")
        _, safe_shown, safe = await answer(client, conv(), FILLER[:400])
    assert cut.finish_reason == FinishReason.SAFETY and cut.error.code == "output_cut"
    assert "sk-proj" not in shown  # never on the wire
    assert cut_id in engine.aborted
    assert safe.finish_reason == FinishReason.STOP
    assert safe_shown == safe.text and safe.text.startswith("You said: word0")


async def test_hold_back_fails_closed_when_the_safety_worker_is_down(services):
    down = {"with_safety": False, "safety_deadline_ms": 300}
    async with stack(services, "hold_back", **down) as (_, _, client):
        _, shown, done = await answer(client, conv(), FILLER[:300])
    assert done.finish_reason == FinishReason.ERROR and shown == ""
    assert done.error is not None and done.error.code == "safety_unavailable"
    assert done.error.retryable


async def test_optimistic_goes_on_when_the_safety_worker_is_down(services):
    down = {"with_safety": False, "safety_deadline_ms": 300}
    async with stack(services, "optimistic", **down) as (_, _, client):
        _, shown, done = await answer(client, conv(), FILLER[:300])
    assert done.finish_reason == FinishReason.STOP and shown == done.text


async def test_the_audit_reads_again_only_what_the_windows_did_not_release(services):
    """Real turns' completions carry their windows' verdicts; the audit's category guard
    (the windows' own classifier) skips the answer they released whole, with no record, and
    reads the cut one."""
    async with stack(services, "hold_back") as (p, _, client):
        safe_id, _, safe = await answer(client, conv(), FILLER[:400])
        cut_id, _, cut = await answer(client, conv(), f"{FILLER[:200]} {SECRET} {FILLER}")
        settings = p.settings
        traces = []
        for turn_id in (safe_id, cut_id):
            asked = await turn_event(settings, "turns.submitted", turn_id)
            done = await turn_event(settings, "turns.completed", turn_id)
            assert isinstance(done, TurnCompleted)
            traces.append(TraceRecorded(turn_id=turn_id, submitted=asked, completed=done))
        assert safe.finish_reason == FinishReason.STOP and len(traces[0].completed.verdicts) > 1
        async with run_auditor(settings) as running:
            for trace in traces:
                await running.service.handle(trace)
            covered, audited = running.service.covered, running.service.ledger.audited
    assert (covered, audited) == (1, 1)
    records = await records_so_far(
        settings.kafka_bootstrap, f"{settings.namespace}.safety.verdicts", bool
    )
    assert [decode(r.value).turn_id for r in records] == [cut_id]
    assert cut.error is not None and cut.error.code == "output_cut"
