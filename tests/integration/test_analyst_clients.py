"""The clients analysts bring, against the sink's ClickHouse HTTP interface over a store the
sink filled: clickhouse-go v2 over HTTP (Grafana's driver; a Go program built from
tests/clients/go), @clickhouse/client (Node, tests/clients/node), clickhouse-connect with
pandas and through its SQLAlchemy dialect (Superset's). What they send is served as a
server serves it or refused with a server's error: sessions, ClickHouse-framed compression
both ways, Native at the client's protocol revision, compressed answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import uuid
from pathlib import Path

import pytest
import sqlalchemy
from clickhouse_connect.driver.exceptions import DatabaseError

from harness.analyst_store import TRACES, TURNS, Sink, ms_time
from harness.grafana import clickhouse_panel_queries
from infra.stack import REPO
from runtime.clickhouse.http_auth import local_password

pytestmark = pytest.mark.integration

CLIENTS = REPO / "tests" / "clients"
ROWS = 500


@pytest.fixture(scope="session")
def go_client(tmp_path_factory) -> Path:
    """clickhouse-go's program, built once (its modules come from the Go proxy, cached)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary = tmp_path_factory.mktemp("go") / "chclient"
    subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=CLIENTS / "go", check=True, timeout=600
    )
    return binary


@pytest.fixture(scope="session")
def node_client() -> Path:
    folder = CLIENTS / "node"
    if not (folder / "node_modules" / "@clickhouse" / "client").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, timeout=600
        )
    return folder / "chclient.mjs"


def run_client(argv: list[str], stdin: object = None):
    """A client program's JSON answer (its statements, if any, as JSON on stdin)."""
    done = subprocess.run(
        argv,
        input=None if stdin is None else json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_go(sink: Sink, binary: Path, *args: str, compress: str = "none", stdin: object = None):
    password = local_password(sink.settings)
    address = f"127.0.0.1:{sink.port}"
    flags = ["-addr", address, "-password", password, "-compress", compress]
    return run_client([str(binary), *flags, *args], stdin)


def run_node(sink: Sink, script: Path, *args: str, stdin: object = None):
    url = f"http://127.0.0.1:{sink.port}"
    return run_client(["node", str(script), url, local_password(sink.settings), *args], stdin)


TRACES_SQL = (
    "SELECT turn_id, tenant_id, model, retrieved, itl_ms, ttft_ms, submitted_at "
    "FROM turnstream.traces FINAL WHERE tenant_id = {tenant:String} ORDER BY submitted_at"
)


@pytest.fixture
def scratch(sink: Sink):
    """A scratch table of every column kind the clients write, dropped after the test."""
    table = f"turnstream.scratch_{uuid.uuid4().hex[:8]}"
    client = sink.client()
    client.command(
        f"CREATE TABLE {table} (id UInt32, tag LowCardinality(String), at DateTime64(3, 'UTC'), "
        "words Array(String), score Nullable(Float64)) ENGINE = MergeTree ORDER BY id"
    )
    yield table
    client.command(f"DROP TABLE IF EXISTS {table}")


def assert_scratch_holds_what_was_sent(sink: Sink, table: str) -> None:
    rows = (
        sink.client()
        .query(
            f"SELECT count(), sum(id), countIf(score IS NULL), sum(length(words)), "
            f"uniqExact(tag), max(at) FROM {table}"
        )
        .result_rows[0]
    )
    count, ids, nulls, words, tags, last = rows
    assert (count, ids, nulls, words, tags) == (
        ROWS,
        ROWS * (ROWS - 1) // 2,
        ROWS // 2,
        2 * ROWS,
        3,
    )
    assert last.replace(tzinfo=None) == ms_time(1796515200000 + ROWS - 1)  # 2026-12-06 UTC


# clickhouse-go v2 over HTTP ------------------------------------------------------------


@pytest.mark.parametrize("compress", ["none", "lz4", "zstd", "gzip"])
def test_clickhouse_go_reads_the_rows_typed(sink, go_client, compress):
    """Its hello and every answer are Native at its protocol revision (BlockInfo, the
    serialization byte); lz4/zstd ask for ClickHouse's compressed blocks (checksummed by
    the driver), gzip for an HTTP-compressed answer."""
    traces, failed = run_go(
        sink,
        go_client,
        "query",
        compress=compress,
        stdin=[
            {"sql": TRACES_SQL, "params": {"tenant": sink.tenant}},
            {"sql": "SELECT * FROM turnstream.no_such_table"},
        ],
    )
    assert traces["columns"] == [
        "turn_id",
        "tenant_id",
        "model",
        "retrieved",
        "itl_ms",
        "ttft_ms",
        "submitted_at",
    ]
    assert traces["types"][1] == "LowCardinality(String)"
    assert traces["types"][3] == "Array(String)"
    assert len(traces["rows"]) == TRACES
    for i, (turn, tenant, model, retrieved, itl, ttft, _at) in enumerate(traces["rows"]):
        assert (turn, tenant, model) == (f"{sink.tenant}-trace-{i}", sink.tenant, f"model-{i % 2}")
        assert retrieved == [f"doc-{i}", "faq"]
        assert itl == pytest.approx([1.5, 2.5 + i]) and ttft == pytest.approx(5.0 + i)
    assert failed["error"]["code"] == 60, failed


@pytest.mark.parametrize("compress", ["none", "lz4"])
def test_clickhouse_go_batch_insert(sink, go_client, scratch, compress):
    """A Native batch; with lz4 the body comes in ClickHouse's blocks (`decompress=1`)."""
    assert run_go(sink, go_client, "insert", scratch, str(ROWS), compress=compress) == {
        "count": ROWS
    }
    assert_scratch_holds_what_was_sent(sink, scratch)


def test_every_grafana_clickhouse_panel_query_runs(sink, go_client):
    """The dashboards' ClickHouse panels, their macros expanded as the plugin expands them
    for the last 7 days, run through clickhouse-go as Grafana runs them and find the
    store's rows."""
    panels = clickhouse_panel_queries(
        REPO / "infra" / "grafana", time.time() - 7 * 86400, time.time()
    )
    assert len(panels) >= 2
    results = run_go(sink, go_client, "query", stdin=[{"sql": sql} for _title, sql in panels])
    for (title, sql), result in zip(panels, results, strict=True):
        assert "error" not in result, (title, sql, result)
        assert result["rows"], (title, sql)


# @clickhouse/client (Node) --------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_node_client_queries_binds_and_gets_errors(sink, node_client, compress):
    flags = ["--compress"] if compress else []
    rows, count, failed = run_node(
        sink,
        node_client,
        *flags,
        "query",
        stdin=[
            {"sql": TRACES_SQL, "params": {"tenant": sink.tenant}},
            {
                "sql": "SELECT count() AS n FROM turnstream.turns WHERE tenant_id = {t:String}",
                "params": {"t": sink.tenant},
                "format": "JSON",
            },
            {"sql": "SELEC 1"},
        ],
    )
    assert [r["turn_id"] for r in rows["rows"]] == [
        f"{sink.tenant}-trace-{i}" for i in range(TRACES)
    ]
    assert rows["rows"][1]["retrieved"] == ["doc-1", "faq"]
    assert int(count["rows"]["data"][0]["n"]) == TURNS
    assert failed["error"]["code"] == 62, failed


@pytest.mark.parametrize("compress", [False, True])
def test_node_client_inserts(sink, node_client, scratch, compress):
    flags = ["--compress"] if compress else []
    assert run_node(sink, node_client, *flags, "insert", scratch, str(ROWS)) == {"count": ROWS}
    assert_scratch_holds_what_was_sent(sink, scratch)


def test_node_client_session_keeps_temporary_tables_and_settings(sink, node_client):
    session = f"node-{uuid.uuid4().hex[:8]}"
    results = run_node(
        sink,
        node_client,
        "--session",
        session,
        "query",
        stdin=[
            {"sql": "CREATE TEMPORARY TABLE picked (turn_id String)", "format": "command"},
            {
                "sql": "INSERT INTO picked SELECT turn_id FROM turnstream.traces "
                f"WHERE tenant_id = '{sink.tenant}'",
                "format": "command",
            },
            {"sql": "SET max_result_rows = 7", "format": "command"},
            {"sql": "SELECT count() AS n, getSetting('max_result_rows') AS limit FROM picked"},
        ],
    )
    assert [r.get("error") for r in results[:3]] == [None, None, None], results
    assert [{k: int(v) for k, v in row.items()} for row in results[3]["rows"]] == [
        {"n": TRACES, "limit": 7}
    ]


# clickhouse-connect: pandas and SQLAlchemy (Superset) ------------------------------------


def test_pandas_reads_and_writes_frames(sink, scratch):
    client = sink.client()
    frame = client.query_df(
        "SELECT turn_id, model, ttft_ms, submitted_at FROM turnstream.traces FINAL "
        "WHERE tenant_id = {tenant:String} ORDER BY submitted_at",
        parameters={"tenant": sink.tenant},
    )
    assert list(frame["turn_id"]) == [f"{sink.tenant}-trace-{i}" for i in range(TRACES)]
    assert frame["ttft_ms"].tolist() == pytest.approx([5.0, 6.0, 7.0])
    assert str(frame["submitted_at"].dtype).startswith("datetime64")
    out = frame.assign(
        id=range(TRACES),
        tag=frame["model"],
        at=frame["submitted_at"],
        words=[["w"]] * TRACES,
        score=frame["ttft_ms"],
    )
    client.insert_df(scratch, out[["id", "tag", "at", "words", "score"]])
    assert client.command(f"SELECT sum(score) FROM {scratch}") == pytest.approx(18.0)


def test_sqlalchemy_dialect_reflects_and_queries_as_superset_does(sink):
    password = local_password(sink.settings)
    engine = sqlalchemy.create_engine(
        f"clickhousedb://default:{password}@127.0.0.1:{sink.port}/turnstream"
    )
    inspector = sqlalchemy.inspect(engine)
    assert "turnstream" in inspector.get_schema_names()
    tables = set(inspector.get_table_names(schema="turnstream"))
    assert {"traces", "turns", "events"} <= tables
    assert {"app_hourly", "business_daily", "quality_daily"} <= set(
        inspector.get_view_names(schema="turnstream")
    )
    columns = {c["name"] for c in inspector.get_columns("traces", schema="turnstream")}
    assert {"turn_id", "tenant_id", "ttft_ms"} <= columns
    traces = sqlalchemy.Table(
        "traces", sqlalchemy.MetaData(schema="turnstream"), autoload_with=engine
    )
    query = (
        sqlalchemy.select(traces.c.model, sqlalchemy.func.count().label("turns"))
        .where(traces.c.tenant_id == sink.tenant)
        .group_by(traces.c.model)
        .order_by(traces.c.model)
    )
    with engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(query)] == [("model-0", 2), ("model-1", 1)]
        by_text = conn.execute(
            sqlalchemy.text("SELECT count() FROM turnstream.turns WHERE tenant_id = :t"),
            {"t": sink.tenant},
        )
        assert by_text.scalar() == TURNS


# what every client may send: served or refused, never dropped ------------------------------


def test_a_session_keeps_what_its_statements_set_not_what_its_urls_set(sink):
    session = f"py-{uuid.uuid4().hex[:8]}"
    client = sink.client(session_id=session)
    client.command("SET max_result_rows = 11")
    client.command("CREATE TEMPORARY TABLE kept (n UInt8)")
    client.command("INSERT INTO kept VALUES (1), (2)")
    assert client.command("SELECT count() FROM kept") == 2
    assert client.command("SELECT getSetting('max_result_rows')") == 11
    assert client.command("SELECT getSetting('max_threads')", settings={"max_threads": 1}) == 1
    assert client.command("SELECT getSetting('max_threads')") != 1  # a URL's setting is its own
    other = sink.client()  # another session sees neither
    assert other.command("SELECT getSetting('max_result_rows')") == 0
    with pytest.raises(DatabaseError) as missing:
        other.command("SELECT count() FROM kept")
    assert missing.value.code == 60


def test_a_busy_or_unknown_session_is_refused_as_a_server_refuses_it(sink):
    session = f"busy-{uuid.uuid4().hex[:8]}"
    marker = uuid.uuid4().hex[:8]
    client = sink.client(session_id=session)  # its own setup queries done before the race
    slow = threading.Thread(target=client.command, args=(f"SELECT sleep(2), '{marker}'",))
    slow.start()
    try:
        running = (
            "SELECT count() FROM system.processes "
            f"WHERE query LIKE '%{marker}%' AND query NOT LIKE '%system.processes%'"
        )
        watcher = sink.client()
        deadline = time.monotonic() + 30
        while watcher.command(running) != 1 and slow.is_alive():
            assert time.monotonic() < deadline
        assert slow.is_alive(), "the slow query ended before it was seen running"
        with pytest.raises(urllib.error.HTTPError) as locked:
            raw(sink, f"?session_id={session}&query=SELECT+1")
        assert locked.value.headers["X-ClickHouse-Exception-Code"] == "373"
    finally:
        slow.join()
    with raw(sink, f"?session_id={session}&session_check=1&query=SELECT+1") as free:
        assert free.read() == b"1\n"  # the session outlived its busy request
    with pytest.raises(urllib.error.HTTPError) as unknown:
        raw(sink, f"?session_id=never-{uuid.uuid4().hex}&session_check=1&query=SELECT+1")
    assert unknown.value.code == 404
    assert unknown.value.headers["X-ClickHouse-Exception-Code"] == "372"


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("role=analyst", 511),  # no roles here: UNKNOWN_ROLE, as for a role nobody made
        ("session_id=s&session_timeout=7200", 36),  # over max_session_timeout
        ("client_protocol_version=new", 6),
        ("compress=maybe", 6),
        ("no_such_setting=1", 115),
    ],
)
def test_parameters_a_server_refuses_are_refused_with_its_code(sink, query, code):
    with pytest.raises(urllib.error.HTTPError) as refused:
        raw(sink, f"?{query}&query=SELECT+1")
    assert refused.value.headers["X-ClickHouse-Exception-Code"] == str(code)
    assert refused.value.read().startswith(f"Code: {code}. ".encode())


def test_transport_parameters_are_served(sink):
    """Progress headers, an answer compressed on request, buffering and quota keys."""
    with raw(
        sink,
        "?send_progress_in_http_headers=1&enable_http_compression=1&wait_end_of_query=1"
        "&buffer_size=1000&quota_key=k&query=SELECT+number+FROM+numbers(1000)",
        headers={"Accept-Encoding": "gzip"},
    ) as answer:
        assert answer.headers["Content-Encoding"] == "gzip"
        assert json.loads(answer.headers["X-ClickHouse-Progress"])["result_rows"] == "1000"
        import gzip

        assert gzip.decompress(answer.read()).split() == [str(n).encode() for n in range(1000)]
    headers = {"X-ClickHouse-Database": "turnstream", "X-ClickHouse-Format": "JSONEachRow"}
    query = urllib.parse.quote(f"SELECT count() AS n FROM traces WHERE tenant_id = '{sink.tenant}'")
    with raw(sink, f"?query={query}", headers=headers) as answer:
        assert int(json.loads(answer.read())["n"]) == TRACES


def raw(sink: Sink, path: str, headers: dict[str, str] | None = None):
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{sink.port}/{path}", headers=headers or {})
    return sink.open(request)


def test_the_readme_questions_run_as_written(sink):
    """The README's one query per monitoring layer runs on a populated store."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Asking the data", 1)[1].split("\n## ", 1)[0]
    queries = re.findall(r"\| `(SELECT [^`]+)` \|", section)
    assert len(queries) == 5
    client = sink.client()
    for sql in queries:
        client.query(sql)  # raises with ClickHouse's error when it does not
