"""The audit's verdicts join the traces in `audited_traces` (the embedded engine, a fresh
data directory in a process of its own)."""

from __future__ import annotations

import textwrap

import pytest

from harness.chdb import check_in_fresh_engine

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent("""
    import time
    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from schemas.events import SafetyAction, SafetyStage, SafetyVerdict
    from runtime.settings import Settings
    from schemas.traces import TRACE_COLUMNS, build_trace
    from harness.factories import completed, submitted
    from workers.sink.event_log import EVENT_COLUMNS, event_row

    now = time.time() * 1000
    client = connect(Settings.from_env())
    migrate(client)
    traces = [
        build_trace(submitted(t, submitted_at_ms=now), completed=completed(t, completed_at_ms=now))
        for t in ("a", "b", "c")
    ]
    rows = [t.values() for t in traces]
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    verdicts = [
        SafetyVerdict(turn_id=t, conversation_id="c", tenant_id="acme", user_id="u",
                      stage=SafetyStage.AUDIT, action=action, labels=labels, at_ms=now + 10,
                      error=error)
        for t, action, labels, error in [
            ("a", SafetyAction.ALLOW, [], ""),  # an earlier verdict, superseded below
            ("b", SafetyAction.ALLOW, [], "unparseable"),
        ]
    ] + [SafetyVerdict(turn_id="a", conversation_id="c", tenant_id="acme", user_id="u",
                       stage=SafetyStage.AUDIT, action=SafetyAction.BLOCK, labels=["S1", "S10"],
                       at_ms=now + 20)]
    rows = [event_row(v, now_ms=now + 30) for v in verdicts]
    client.insert("turnstream.events", rows, column_names=list(EVENT_COLUMNS))
    got = client.query(
        "SELECT turn_id, audit_action, audit_labels, audit_error "
        "FROM turnstream.audited_traces ORDER BY turn_id"
    ).result_rows
    assert got == [
        ("a", "block", ["S1", "S10"], ""),
        ("b", "allow", [], "unparseable"),
        ("c", "", [], ""),
    ], got
    print("ok")
""")


def test_audit_verdicts_join_their_traces(tmp_path):
    check_in_fresh_engine(SCRIPT, tmp_path)
