"""An analyst limited to some tenants, through the sink's ClickHouse interface: every read
of a tenant table (directly, through the views, in subqueries and joins, from pandas) sees
its tenants' rows only; the ways around the filter (table functions that read storage
directly, files, other system tables, writes, unsetting the filter by SET, by URL or by a
SETTINGS clause) are refused with ClickHouse's codes; `default` still sees every tenant."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import uuid

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from harness.analyst_store import TRACES, TURNS, Sink
from runtime.clickhouse import analysts
from runtime.clickhouse.tenant_scope import ACCESS_DENIED, SERVER_TENANT_TABLES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def other_tenant(sink: Sink) -> str:
    other = f"other-{uuid.uuid4().hex[:8]}"
    client = sink.client()
    client.command(
        "INSERT INTO turnstream.turns (turn_id, tenant_id, model, completed_at) VALUES "
        f"('{other}-1', '{other}', 'm9', now64()), ('{other}-2', '{other}', 'm9', now64())"
    )
    # a spoken answer of the other tenant: its trace and its delivery (a view's join)
    client.command(
        "INSERT INTO turnstream.traces (turn_id, tenant_id, submitted_at) VALUES "
        f"('{other}-1', '{other}', now64())"
    )
    client.command(
        "INSERT INTO turnstream.events (kind, turn_id, tenant_id, at, detail) VALUES "
        f"('speech.delivered', '{other}-1', '{other}', now64(), 'completed')"
    )
    return other


@pytest.fixture(scope="module")
def limited(sink: Sink, other_tenant: str):
    """A clickhouse-connect client of an analyst limited to the store's first tenant."""
    user = f"analyst_{uuid.uuid4().hex[:6]}"
    password = analysts.add(analysts.analysts_path(sink.settings), user, [sink.tenant])
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=sink.port, username=user, password=password
    )
    client.user, client.password_ = user, password  # type: ignore[attr-defined]
    return client


def test_default_sees_every_tenant(sink, other_tenant):
    tenants = sink.client().query("SELECT DISTINCT tenant_id FROM turnstream.turns").result_rows
    assert {sink.tenant, other_tenant} <= {t for (t,) in tenants}


def test_the_analyst_reads_its_tenants_rows_wherever_they_are_read(sink, limited, other_tenant):
    assert limited.query("SELECT DISTINCT tenant_id FROM turnstream.turns").result_rows == [
        (sink.tenant,)
    ]
    assert limited.command("SELECT count() FROM turnstream.turns") == TURNS
    assert (
        limited.command(f"SELECT count() FROM turnstream.turns WHERE tenant_id = '{other_tenant}'")
        == 0
    )
    assert limited.command("SELECT count() FROM turnstream.traces") == TRACES
    daily = limited.query("SELECT DISTINCT tenant_id FROM turnstream.business_daily")
    assert daily.result_rows == [(sink.tenant,)]
    spoken = limited.query("SELECT DISTINCT tenant_id FROM turnstream.speech_hops")
    assert spoken.result_rows == [(sink.tenant,)]
    assert (
        len(
            sink.client().query("SELECT DISTINCT tenant_id FROM turnstream.speech_hops").result_rows
        )
        >= 2
    )
    joined = limited.command(
        "SELECT count() FROM turnstream.turns AS a JOIN (SELECT turn_id FROM turnstream.turns) "
        "AS b USING turn_id WHERE a.tenant_id IN (SELECT tenant_id FROM turnstream.turns)"
    )
    assert joined == TURNS
    frame = limited.query_df("SELECT tenant_id, count() AS n FROM turnstream.turns GROUP BY 1")
    assert frame.to_dict("records") == [{"tenant_id": sink.tenant, "n": TURNS}]


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT count() FROM merge('turnstream', '^turns$')", ACCESS_DENIED),
        ("SELECT * FROM mergeTreeIndex('turnstream', 'turns') LIMIT 1", ACCESS_DENIED),
        ("SELECT count() FROM merge('turnstream', '^turns$') FORMAT JSON", ACCESS_DENIED),
        ("SELECT file('/etc/hostname')", ACCESS_DENIED),
        ("SELECT query FROM system.processes", ACCESS_DENIED),
        ("INSERT INTO turnstream.turns (turn_id, tenant_id) VALUES ('x', 'x')", ACCESS_DENIED),
        ("SET additional_table_filters = {}", ACCESS_DENIED),
        ("CREATE TABLE turnstream.mine (a UInt8) ENGINE = Memory", ACCESS_DENIED),
        ("SELECT count() FROM turnstream.turns SETTINGS additional_table_filters = {}", 164),
        ("SELECT count() FROM turnstream.turns SETTINGS readonly = 0", 164),
    ],
)
def test_the_ways_around_the_filter_are_refused(limited, sql, code):
    with pytest.raises(DatabaseError) as refused:
        limited.query(sql)
    assert f"Code: {code}." in str(refused.value), refused.value


def test_a_url_setting_cannot_lift_the_filter(sink, limited):
    query = urllib.parse.urlencode(
        {
            "query": "SELECT count() FROM turnstream.turns",
            "additional_table_filters": "{}",
            "readonly": "0",
            "user": limited.user,
            "password": limited.password_,
        }
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/?{query}", timeout=30) as answer:
        assert answer.read() == f"{TURNS}\n".encode()


def test_a_wrong_password_or_an_unknown_user_is_refused(sink, limited):
    for user, password in ((limited.user, "guess"), ("nobody", limited.password_)):
        query = urllib.parse.urlencode({"query": "SELECT 1", "user": user, "password": password})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/?{query}", timeout=30)
        assert refused.value.headers["X-ClickHouse-Exception-Code"] == "516"


def test_removing_the_analyst_closes_the_door_without_a_restart(sink):
    path = analysts.analysts_path(sink.settings)
    user = f"gone_{uuid.uuid4().hex[:6]}"
    password = analysts.add(path, user, [sink.tenant])
    query = urllib.parse.urlencode({"query": "SELECT 1", "user": user, "password": password})
    with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/?{query}", timeout=30) as ok:
        assert ok.read() == b"1\n"
    assert analysts.main(["remove", user]) == 2  # another home: the CLI reads the env's
    credentials = analysts.load(path)
    del credentials[user]
    analysts.save(path, credentials)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/?{query}", timeout=30)
    assert refused.value.code == 401


def test_the_servers_row_policies_cover_every_tenant_table_of_the_store(sink):
    tables = sink.client().query(
        "SELECT DISTINCT c.table FROM system.columns AS c JOIN system.tables AS t "
        "ON c.database = t.database AND c.table = t.name "
        "WHERE c.database = 'turnstream' AND c.name = 'tenant_id' "
        "AND t.engine NOT IN ('View', 'MaterializedView')"
    )
    assert sorted(t for (t,) in tables.result_rows) == list(SERVER_TENANT_TABLES)
