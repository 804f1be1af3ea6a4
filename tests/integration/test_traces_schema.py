"""The traces table and the monitoring views on the real (embedded) ClickHouse engine, fed
with rows built from real events."""

from __future__ import annotations

import textwrap

import pytest

from tests.support.chdb import check_in_fresh_engine

pytestmark = pytest.mark.integration

CHECK = textwrap.dedent("""
    from infra.clickhouse.client import connect
    from infra.clickhouse.migrate import migrate
    from schemas.events import Timings, Usage
    from schemas.settings import Settings
    from schemas.traces import TRACE_COLUMNS, Prices, build_trace
    from tests.support.factories import completed, submitted

    import time

    now = time.time() * 1000  # the table's TTL drops old rows: stamp them recent
    client = connect(Settings.from_env())
    migrate(client)
    prices = Prices({"m": (1.0, 2.0)})
    rows = []
    for i, user in enumerate(["u1", "u2", "u1"]):
        turn = submitted(f"t{i}", user_id=user, submitted_at_ms=now + i)
        done = completed(
            f"t{i}",
            user_id=user,
            usage=Usage(10, 5),
            timings=Timings(queue_ms=1, ttft_ms=10.0 * (i + 1), e2e_ms=50, itl_ms=[2.0, 4.0]),
            completed_at_ms=now + 50 + i,
        )
        rows.append(build_trace(turn, completed=done, prices=prices).values())
    late = submitted("t9", submitted_at_ms=now)
    rows.append(build_trace(late, closed_at_ms=now + 60_000).values())
    client.insert("turnstream.traces", rows, column_names=list(TRACE_COLUMNS))
    client.insert("turnstream.traces", rows[:1], column_names=list(TRACE_COLUMNS))  # a retry
    count = client.query("SELECT count() FROM turnstream.traces FINAL").result_rows[0][0]
    assert count == 4, count  # the retried row replaced itself
    app = client.query(
        "SELECT sum(turns), max(ttft_p99_ms), max(timeout_rate) FROM turnstream.app_hourly"
    ).result_rows[0]
    assert app[0] == 4 and 29.0 < app[1] <= 30.0 and app[2] > 0, app
    day = client.query(
        "SELECT active_users, completion_tokens, cost_usd FROM turnstream.business_daily"
    ).result_rows[0]
    # users u1, u2 and the timed-out turn's u; its tokens and cost are zero
    assert day[0] == 3 and day[1] == 15 and abs(day[2] - 3 * 20e-6) < 1e-12, day
    print("ok")
""")


def test_traces_and_views_on_the_embedded_engine(tmp_path):
    check_in_fresh_engine(CHECK, tmp_path)
