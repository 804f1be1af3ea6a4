"""A canary in live traffic on the real pipeline: the edge puts a conversation in an arm,
the candidate's system prompt reaches the prompt, rollback takes effect; the arms compare
in ClickHouse (the embedded engine, in a process of its own)."""

from __future__ import annotations

import argparse
import json
import textwrap

import pytest

from flywheel import canary
from harness.chdb import check_in_fresh_engine
from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt
from harness.polling import eventually
from schemas.events import TurnAssembled
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration

POLL_S = 1.0  # no faster than the free tier's request refill (one a second)


async def test_a_canary_arm_runs_the_candidate_until_rollback(fake_pipeline, tmp_path):
    settings = fake_pipeline.settings
    candidate = tmp_path / "terse.json"
    candidate.write_text(json.dumps({"name": "terse", "system_prompt": "CANARY PERSONA"}))
    begin = argparse.Namespace(
        candidate=str(candidate), fraction=1.0, tenants="canaryco", replace=True
    )
    print(await canary.start(settings, begin))
    try:
        assert "terse" in await canary.status(settings)

        async def routed(tenant: str) -> TurnAssembled:
            token = fake_pipeline.token("ann", tenant)
            async with EdgeClient.connect(fake_pipeline.url, token) as client:
                done = await client.ask(conv(), "hello")
            return await assembled_prompt(settings, done.turn_id)

        async def in_arm() -> bool:  # the edges re-read the experiment within a second
            return (await routed("canaryco")).submitted.arm == "terse"

        # a poll is a turn of the tenant (free tier: 15 requests of burst, one a second
        # refilled): polling faster than the refill ran it out behind a slow pipeline
        await eventually(in_arm, timeout_s=30, every_s=POLL_S)
        turn = await routed("canaryco")
        assert turn.messages[0].role == "system"
        assert turn.messages[0].content.startswith("CANARY PERSONA")
        other = await routed("acme")  # not in the experiment's tenants
        assert other.submitted.arm == "control"
        assert not other.messages[0].content.startswith("CANARY PERSONA")
    finally:
        print(await canary.rollback(settings))
    assert await canary.status(settings) == (
        "no canary running: all traffic on the deployment's configuration"
    )

    async def back_to_control() -> bool:
        token = fake_pipeline.token("ann", "canaryco")
        async with EdgeClient.connect(fake_pipeline.url, token) as client:
            done = await client.ask(conv(), "hello again")
        return (await assembled_prompt(settings, done.turn_id)).submitted.arm == ""

    await eventually(back_to_control, timeout_s=30, every_s=POLL_S)


COMPARE = textwrap.dedent("""
    import time
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from flywheel.canary import compare
    from schemas.events import FeedbackGiven, FeedbackKind, ErrorInfo, Timings
    from runtime.settings import Settings
    from schemas.traces import TRACE_COLUMNS, build_trace
    from harness.factories import completed, submitted
    from workers.sink.rows import FEEDBACK_COLUMNS, feedback_row

    now = time.time() * 1000
    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    rows = []
    for i in range(10):
        arm = "terse" if i < 4 else "control"
        error = ErrorInfo("engine_error", "x") if i in (0, 1) else None
        done = completed(f"t{i}", completed_at_ms=now, error=error,
                         timings=Timings(queue_ms=1, ttft_ms=100.0 * (i + 1), e2e_ms=500))
        rows.append(build_trace(submitted(f"t{i}", submitted_at_ms=now, arm=arm),
                                completed=done).values())
    rows.append(build_trace(submitted("live", submitted_at_ms=now),
                            completed=completed("live", completed_at_ms=now)).values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    votes = [("t2", FeedbackKind.THUMBS_UP), ("t3", FeedbackKind.THUMBS_DOWN),
             ("t5", FeedbackKind.THUMBS_UP)]
    feedback = [feedback_row(FeedbackGiven(turn_id=t, conversation_id="c", tenant_id="acme",
                                           user_id="u", kind=k, given_at_ms=now), now_ms=now)
                for t, k in votes]
    client.insert("turnstream.feedback", feedback, column_names=list(FEEDBACK_COLUMNS))
    table = compare(settings, 24)
    print(table)
    lines = [l for l in table.splitlines() if l.strip().startswith(("control", "terse"))]
    control, terse = ([float(v) for v in l.split()[1:]] for l in lines)
    # turns, error rate, ..., thumbs-up share (the live turn has no arm: not counted)
    assert (control[0], control[1], control[-1]) == (6, 0.0, 1.0), table
    assert (terse[0], terse[1], terse[-1]) == (4, 0.5, 0.5), table
    print("ok")
""")


def test_arms_compare_in_clickhouse(tmp_path):
    check_in_fresh_engine(COMPARE, tmp_path)
