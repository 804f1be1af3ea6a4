"""The embedded engine's threads stay few while the sink's small inserts pile up outdated
parts: their cleanup runs in the cleaning thread (migration 0016), instead of borrowing up
to 128 threads that the engine's global pool then keeps for good, each holding 3 open
/proc files once it runs a query (the 30-minute soak's sink: 71 open files became 389)."""

from __future__ import annotations

import json
import textwrap

import pytest

from harness.chdb import run_in_engine

pytestmark = pytest.mark.integration

# Small inserts into the busiest table (the events log) until the engine has merged and
# removed at least `removals` outdated parts; prints the process's thread counts.
_INSERT_UNTIL_CLEANED = textwrap.dedent(r"""
    import json, os, sys, time

    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from runtime.settings import Settings

    removals, deadline_s = int(sys.argv[1]), float(sys.argv[2])
    client = connect(Settings.from_env())
    migrate(client)

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    columns = client.query(
        "SELECT name, type FROM system.columns WHERE database = 'turnstream'"
        " AND table = 'events' AND default_kind = ''"
    ).result_rows
    names = ", ".join(name for name, _ in columns)
    structure = ", ".join(f"{name} {kind}" for name, kind in columns).replace("'", "\\'")
    insert = (
        f"INSERT INTO turnstream.events ({names})"
        f" SELECT * FROM generateRandom('{structure}', 1, 16, 2) LIMIT 20"
    )
    before = threads()
    most = before
    outdated_seen = 0
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for _ in range(50):
            client.command(insert)
        most = max(most, threads())
        outdated = int(client.command(
            "SELECT count() FROM system.parts WHERE database = 'turnstream'"
            " AND table = 'events' AND NOT active"
        ))
        outdated_seen = max(outdated_seen, outdated)
        if outdated_seen >= removals and outdated < outdated_seen // 2:
            break
    print(json.dumps({"before": before, "most": most, "outdated_seen": outdated_seen,
                      "outdated_now": outdated}))
""")


def test_removing_outdated_parts_takes_no_burst_of_threads(tmp_path):
    out = run_in_engine(_INSERT_UNTIL_CLEANED, tmp_path, "150", "120")
    seen = json.loads(out.strip().splitlines()[-1])
    # the cleanup ran on more parts than the default threshold (100) of concurrent removal
    assert seen["outdated_seen"] >= 150 and seen["outdated_now"] < seen["outdated_seen"] // 2
    # a burst would be ~128 threads; inserts, merges and the schedule pools need a few
    assert seen["most"] - seen["before"] < 48, seen
