"""The tenant-limited analyst's rules: filters quoted whatever the tenant is called, the
query trees that may run, the statements refused before, and the server's equivalent."""

from __future__ import annotations

import chdb
import pytest

from runtime.clickhouse.tenant_scope import (
    Catalog,
    row_policy_sql,
    statement_refusal,
    table_filters,
    tree_refusal,
)

CATALOG = Catalog("d", frozenset({"t"}), frozenset({"vw"}))


@pytest.fixture(scope="module")
def engine():
    conn = chdb.connect(":memory:")
    conn.query("CREATE DATABASE d")
    conn.query("CREATE TABLE d.t (tenant_id String, v UInt8) ENGINE = MergeTree ORDER BY tenant_id")
    conn.query("INSERT INTO d.t VALUES ('a', 1), ('b', 2), ('a'') OR (1 = 1', 3)")
    conn.query("CREATE VIEW d.vw AS SELECT tenant_id, sum(v) AS s FROM d.t GROUP BY tenant_id")
    conn.query("CREATE TABLE d.secret (x String) ENGINE = Memory")
    yield conn
    conn.close()


def tree(engine, sql: str) -> str:
    return engine.query(f"EXPLAIN QUERY TREE {sql}", "TSVRaw").bytes().decode()


def test_filters_hold_whatever_the_tenant_is_called(engine):
    hostile = "a') OR (1 = 1"
    conn = chdb.connect(":memory:")  # same engine, fresh settings
    try:
        conn.query(f"SET additional_table_filters = {table_filters(CATALOG, (hostile,))}")
        rows = conn.query("SELECT v FROM d.t ORDER BY v", "TSV").bytes()
        assert rows == b"3\n"  # the tenant literally named so, nobody else
        conn.query(f"SET additional_table_filters = {table_filters(CATALOG, ('a',))}")
        assert conn.query("SELECT tenant_id, s FROM d.vw", "TSV").bytes() == b"a\t1\n"
    finally:
        conn.close()
    assert "NULL" in table_filters(CATALOG, ())  # no tenant: no row


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM d.t",
        "SELECT * FROM d.vw WHERE s IN (SELECT number FROM numbers(3))",
        "SELECT name FROM system.tables",
        "WITH x AS (SELECT * FROM d.t) SELECT count() FROM x",
        "SELECT * FROM view(SELECT * FROM d.t)",
    ],
)
def test_trees_that_read_tenant_tables_views_and_metadata_run(engine, sql):
    assert tree_refusal(tree(engine, sql), CATALOG) is None


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SELECT * FROM merge('d', '^t$')", "merge"),
        ("SELECT * FROM d.t WHERE v IN (SELECT v FROM merge('d', '^t$'))", "merge"),
        ("SELECT * FROM mergeTreeIndex('d', 't')", "mergeTreeIndex"),
        ("SELECT * FROM d.secret", "d.secret"),
        ("SELECT * FROM system.processes", "system.processes"),
        ("SELECT file('/etc/hostname')", "file"),
    ],
)
def test_trees_that_read_around_the_filters_are_refused(engine, sql, named):
    why = tree_refusal(tree(engine, sql), CATALOG)
    assert why is not None and named in why


def test_only_reading_statements_are_let_through():
    for kind in ("SELECT", "WITH", "(", "SHOW", "DESCRIBE", "EXISTS", "EXPLAIN"):
        assert statement_refusal(kind) is None
    for kind in ("INSERT", "SET", "CREATE", "DROP", "ALTER", "SYSTEM", "USE", ""):
        assert statement_refusal(kind) is not None


def test_the_server_equivalent_is_row_policies_and_readonly():
    sql = row_policy_sql("turnstream", "acme_analyst", ("acme", "o'hare"), ["traces", "turns"])
    assert "CREATE ROW POLICY IF NOT EXISTS acme_analyst_traces ON turnstream.traces" in sql
    assert "USING tenant_id IN ('acme', 'o\\'hare') TO acme_analyst;" in sql
    assert sql.endswith("ALTER USER acme_analyst SETTINGS readonly = 1;")
