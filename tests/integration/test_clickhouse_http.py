"""Analysts' access while the sink runs: a real sink process (embedded engine, its own data
directory and namespace) serves the ClickHouse HTTP interface, and clickhouse-connect's
HTTP client and the SQL CLI read what the sink wrote, write scratch tables, bind
parameters, get ClickHouse's errors with their codes and run queries side by side."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from urllib.request import Request

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from harness.analyst_store import TRACES, TURNS, Sink, ms_time, naive_utc
from harness.polling import eventually
from infra.stack import REPO
from runtime.clickhouse.client import analyst_client, sink_http_answers
from runtime.clickhouse.http_auth import PASSWORD_FILE, USER, local_password
from runtime.settings import Settings, settings_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("compress", [False, True])
def test_rows_the_sink_wrote_come_back_typed(sink, compress):
    client = sink.client(compress)
    result = client.query(
        "SELECT turn_id, tenant_id, model, retrieved, itl_ms, ttft_ms, submitted_at, "
        "completed_at, toTypeName(tenant_id) FROM turnstream.traces FINAL "
        "WHERE tenant_id = %(t)s ORDER BY submitted_at",
        parameters={"t": sink.tenant},
    )
    assert result.column_names[:3] == ("turn_id", "tenant_id", "model")
    assert len(result.result_rows) == TRACES
    for i, row in enumerate(result.result_rows):
        turn, tenant, model, retrieved, itl, ttft, sent_at, done_at, tenant_type = row
        stamp = sink.stamp_ms + 1000 * i
        assert (turn, tenant, model) == (f"{sink.tenant}-trace-{i}", sink.tenant, f"model-{i % 2}")
        assert tenant_type == "LowCardinality(String)"
        assert retrieved == [f"doc-{i}", "faq"]
        assert itl == pytest.approx([1.5, 2.5 + i]) and ttft == pytest.approx(5.0 + i)
        assert naive_utc(sent_at) == ms_time(stamp)
        assert naive_utc(done_at) == ms_time(stamp + 100 + i)
    turns = client.query(
        "SELECT turn_id, text, ttft_ms, completed_at FROM turnstream.turns FINAL "
        "WHERE tenant_id = %(t)s ORDER BY turn_id",
        parameters={"t": sink.tenant},
    ).result_rows
    assert [(t[0], t[1]) for t in turns] == [
        (f"{sink.tenant}-turn-{i}", f"answer {i}") for i in range(TURNS)
    ]
    assert turns[0][2] is None and turns[1][2] == pytest.approx(3.0)  # Nullable
    assert naive_utc(turns[3][3]) == ms_time(sink.stamp_ms + 3)


@pytest.mark.parametrize("compress", [False, True, "zstd", "gzip"])
def test_command_and_insert_round_trip_a_scratch_table(sink, compress):
    client = sink.client(compress)
    table = f"turnstream.scratch_{uuid.uuid4().hex[:8]}"
    client.command(
        f"CREATE TABLE {table} (id UInt32, tag LowCardinality(String), at DateTime64(3, 'UTC'), "
        "words Array(String), score Nullable(Float64)) ENGINE = MergeTree ORDER BY id"
    )
    try:
        rows = [
            (i, f"tag-{i % 3}", ms_time(sink.stamp_ms + i), ["w"] * i, None if i % 2 else i / 4)
            for i in range(500)
        ]
        summary = client.insert(table, rows, column_names=["id", "tag", "at", "words", "score"])
        assert summary.written_rows == len(rows)
        back = client.query(f"SELECT * FROM {table} ORDER BY id").result_rows
        assert [(r[0], r[1], naive_utc(r[2]), r[3], r[4]) for r in back] == rows
        assert client.command(f"SELECT count() FROM {table} WHERE tag = 'tag-1'") == 167
        assert client.command(f"SELECT max(id), min(tag) FROM {table}") == ["499", "tag-0"]
    finally:
        client.command(f"DROP TABLE IF EXISTS {table}")
    assert not client.command(f"EXISTS TABLE {table}")


@pytest.mark.parametrize("form", [False, True])
def test_server_side_bind_parameters(sink, form):
    """In the URL, or as multipart form fields (what clickhouse-connect does for large
    parameters or when asked)."""
    client = sink.client(form_encode_query_params=form)
    ids = [f"{sink.tenant}-trace-0", f"{sink.tenant}-trace-2", "nobody"]
    rows = client.query(
        "SELECT turn_id, {label:String} FROM turnstream.traces FINAL "
        "WHERE tenant_id = {tenant:String} AND turn_id IN {ids:Array(String)} ORDER BY turn_id",
        parameters={"tenant": sink.tenant, "ids": ids, "label": "it's"},
    ).result_rows
    assert rows == [(ids[0], "it's"), (ids[1], "it's")]


def test_wrong_sql_raises_the_clickhouse_error_with_its_code(sink):
    client = sink.client()
    with pytest.raises(DatabaseError) as syntax:
        client.query("SELEC 1")
    assert syntax.value.code == 62 and "Syntax error" in str(syntax.value)
    with pytest.raises(DatabaseError) as missing:
        client.command("SELECT * FROM turnstream.no_such_table")
    assert missing.value.code == 60
    url = f"http://127.0.0.1:{sink.port}/?query=SELECT+nope_nope()"
    with pytest.raises(urllib.error.HTTPError) as raw:
        sink.open(url)
    assert raw.value.code == 404 and raw.value.headers["X-ClickHouse-Exception-Code"] == "46"
    assert raw.value.read().startswith(b"Code: 46. DB::Exception:")


def test_plain_http_headers_formats_and_readonly_get(sink):
    query = (
        "SELECT turn_id FROM turnstream.turns FINAL "
        f"WHERE tenant_id = '{sink.tenant}' ORDER BY turn_id"
    )
    request = urllib.request.Request(  # urllib posts as a form, as `curl -d` does: still SQL
        f"http://127.0.0.1:{sink.port}/?default_format=JSONEachRow&query_id=mine",
        data=query.encode(),
    )
    with sink.open(request) as response:
        rows = [json.loads(line) for line in response.read().splitlines()]
        assert rows == [{"turn_id": f"{sink.tenant}-turn-{i}"} for i in range(TURNS)]
        assert response.headers["X-ClickHouse-Format"] == "JSONEachRow"
        assert response.headers["X-ClickHouse-Query-Id"] == "mine"
        assert response.headers["X-ClickHouse-Timezone"]
        summary = json.loads(response.headers["X-ClickHouse-Summary"])
        assert int(summary["read_rows"]) >= TURNS and summary["result_rows"] == str(TURNS)
    with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/ping", timeout=30) as ping:
        assert ping.read() == b"Ok.\n"
    create = "CREATE+TABLE+turnstream.get_refused+(a+UInt8)+ENGINE=Memory"
    with pytest.raises(urllib.error.HTTPError) as refused:  # GET is read-only, as on a server
        sink.open(f"http://127.0.0.1:{sink.port}/?query={create}")
    assert refused.value.headers["X-ClickHouse-Exception-Code"] == "164"


def test_only_the_password_opens_the_interface(sink):
    """Every way a server takes credentials works; none, a wrong password or another user
    get ClickHouse's authentication error; /ping stays open. The generated password is
    readable by its owner only."""
    select = f"http://127.0.0.1:{sink.port}/?query=SELECT+1"
    password = local_password(sink.settings)
    for refused_request in (
        Request(select),
        Request(select, headers={"X-ClickHouse-User": USER, "X-ClickHouse-Key": "guess"}),
        Request(select, headers={"X-ClickHouse-User": "root", "X-ClickHouse-Key": password}),
        Request(f"{select}&user={USER}&password=guess"),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(refused_request, timeout=30)
        assert refused.value.code == 401
        assert refused.value.headers["X-ClickHouse-Exception-Code"] == "516"
    with urllib.request.urlopen(f"{select}&user={USER}&password={password}", timeout=30) as ok:
        assert ok.read() == b"1\n"
    with pytest.raises(DatabaseError) as wrong:
        clickhouse_connect.get_client(
            host="127.0.0.1", port=sink.port, username=USER, password="guess"
        )
    assert "516" in str(wrong.value) or "Authentication" in str(wrong.value)
    with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/ping", timeout=30) as ping:
        assert ping.status == 200
    mode = (sink.settings.state_path / PASSWORD_FILE).stat().st_mode & 0o777
    assert mode == 0o600


async def test_a_query_is_answered_while_another_runs(sink):
    """The slow query is seen running in system.processes by a second query: the second
    was served meanwhile (no timing assumed). Both answers are complete."""
    marker = f"slow-{uuid.uuid4().hex[:8]}"
    slow_sql = (
        f"SELECT sum(number), max(sleepEachRow(0.02)), '{marker}' FROM numbers(250) "
        "SETTINGS max_block_size = 1"
    )
    slow = asyncio.create_task(asyncio.to_thread(lambda: sink.client().query(slow_sql)))
    other = await asyncio.to_thread(sink.client)
    seen = (
        "SELECT count() FROM system.processes "
        f"WHERE query LIKE '%{marker}%' AND query NOT LIKE '%system.processes%'"
    )

    async def slow_is_running() -> bool:
        return slow.done() or await asyncio.to_thread(other.command, seen) == 1

    try:
        await eventually(slow_is_running, every_s=0.01)
        assert not slow.done(), f"the slow query ended before it was seen: {slow}"
        count = f"SELECT count() FROM turnstream.traces WHERE tenant_id = '{sink.tenant}'"
        assert await asyncio.to_thread(other.command, count) == TRACES
    finally:
        result = await slow
    assert result.result_rows == [(250 * 249 // 2, 0, marker)]


def test_analyst_client_takes_the_running_sink_and_only_its_own(sink, tmp_path):
    assert sink_http_answers(sink.settings)
    client = analyst_client(sink.settings)
    assert type(client).__name__ != "ChdbClient"
    count = f"SELECT count() FROM turnstream.turns WHERE tenant_id = '{sink.tenant}'"
    assert client.command(count) == TURNS
    stranger = Settings.from_env(
        state_dir=str(tmp_path / "other-home"), clickhouse_http_port=sink.port
    )
    assert not sink_http_answers(stranger)  # another home's sink is not ours


def run_cli(sink: Sink, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **settings_env(sink.settings)}
    return subprocess.run(
        [sys.executable, "-m", "runtime.clickhouse.sql", *args],
        check=False,
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_a_table_raw_formats_and_errors(sink, tmp_path):
    """The sink holds the engine's lock: the CLI can only answer through the interface."""
    sql = (
        "SELECT model, count() AS turns, arraySort(groupArray(history_messages)) AS history "
        f"FROM turnstream.traces FINAL WHERE tenant_id = '{sink.tenant}' "
        "GROUP BY model ORDER BY model"
    )
    table = run_cli(sink, sql)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["model", "turns", "history"]
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split() == ["model-0", "2", "[0,", "2]"]
    assert lines[3].split() == ["model-1", "1", "[1]"]
    assert lines[4] == "(2 rows)"

    script = tmp_path / "q.sql"
    script.write_text(sql + ";\n")
    csv = run_cli(sink, "-f", str(script), "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines() == [
        '"model","turns","history"',
        '"model-0",2,"[0,2]"',
        '"model-1",1,"[1]"',
    ]
    piped = run_cli(sink, "-", "--format", "json", stdin=sql)
    assert [json.loads(line)["turns"] for line in piped.stdout.splitlines()] == [2, 1]

    wrong = run_cli(sink, "SELECT * FROM turnstream.no_such_table")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.startswith("Code: 60. DB::Exception:"), wrong.stderr
