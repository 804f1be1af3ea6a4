"""Running a script against an embedded ClickHouse engine in its own process (chdb allows
one data directory per process, and the test process may already hold one)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from infra.stack import REPO


def run_in_engine(script: str, home: Path, *args: str) -> str:
    """Run `script` (with `args`) against the engine under TURNSTREAM_HOME=`home`, in a
    process of its own; it must exit 0. Returns what it printed."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"TURNSTREAM_HOME": str(home), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def check_in_fresh_engine(script: str, home: Path) -> None:
    """Run `script` with TURNSTREAM_HOME=`home`; it must exit 0 and print `ok` last."""
    assert run_in_engine(script, home).strip().endswith("ok")


_SINK_AND_QUERY = textwrap.dedent("""
    import asyncio, json, sys

    from runtime.clickhouse.client import connect
    from runtime.clickhouse.migrate import migrate
    from runtime.settings import Settings
    from workers.sink.app import run_sink

    namespace, turn_id, columns = sys.argv[1], sys.argv[2], sys.argv[3]
    settings = Settings.from_env(namespace=namespace, sink_linger_ms=50)
    client = connect(settings)
    migrate(client)
    query = f"SELECT {columns} FROM turnstream.traces FINAL WHERE turn_id = %(t)s"

    def rows() -> list:
        return client.query(query, parameters={"t": turn_id}).result_rows

    async def sink_until_written() -> None:
        async with run_sink(settings, client, ("traces",)):
            async with asyncio.timeout(120):
                while not await asyncio.to_thread(rows):
                    await asyncio.sleep(0.1)

    asyncio.run(sink_until_written())
    print(json.dumps(rows()))
""")


def sink_trace_rows(home: Path, namespace: str, turn_id: str, columns: str) -> list:
    """Run the real sink (in a process of its own, on the engine under `home`) on the
    namespace's `traces` topic until the turn's trace row is written; its `columns`."""
    out = run_in_engine(_SINK_AND_QUERY, home, namespace, turn_id, columns)
    return json.loads(out.strip().splitlines()[-1])
