"""Runs one parsed HTTP request on the embedded engine (blocking: the server calls it from
worker threads).

Each request gets its own chdb connection. chdb documents that queries on different
connections to the one engine of a process run in parallel and safely, while one
connection must not be used by two threads at once and keeps `USE`/`SET` state; measured
here (chdb 4.4): two 0.14 s queries on two connections finish together in 0.18 s, the GIL
is released meanwhile, and 8 threads opening, SETting, inserting and closing connections
in a loop run clean. A connection costs ~0.2 ms to open while the engine is up, and a fresh
one per request means a request's settings and database never leak into the next. The
engine stays up between requests through `_keeper`, a connection held for the server's life.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import chdb

from runtime.clickhouse import tenant_scope
from runtime.clickhouse.client import DEFAULT_DATABASE
from runtime.clickhouse.http_protocol import (
    RESULT_STATEMENTS,
    HttpQuery,
    error_code,
    quote_string,
    set_statement,
    statement_kind,
    without_format,
)
from workers.sink.errors import SinkError

READONLY = 164


class EngineError(SinkError):
    """The engine refused or failed the statement: its ClickHouse error number and message."""

    code = "clickhouse_engine_error"

    def __init__(self, number: int, message: str) -> None:
        super().__init__(message)
        self.number = number
        self.message = message


@dataclass(frozen=True, slots=True)
class Outcome:
    body: bytes
    fmt: str | None  # output format; None when the statement has no result set
    summary: dict[str, str]


class EmbeddedEngine:
    """The engine at `location` (the same spelling the process's other clients use: chdb
    compares engine paths literally)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._keeper: Any = chdb.connect(location)
        row = self._keeper.query("SELECT timezone()", "TabSeparated").bytes()
        self.timezone = row.decode().strip()

    def close(self) -> None:
        self._keeper.close()

    def connect(self) -> Any:
        """A connection of its own (a session keeps one between requests)."""
        return chdb.connect(self.location)

    def run(self, request: HttpQuery, tenants: tuple[str, ...] | None = None) -> Outcome:
        """On a fresh connection: the request's database and settings die with it. With
        `tenants`, only those tenants' rows can be read (`tenant_scope`)."""
        conn = self.connect()
        try:
            if tenants is not None:
                _refuse_outside(conn, request)
            if request.database:
                _query(conn, f"USE {quote_name(request.database)}", "TabSeparated")
            for name, value in request.settings.items():
                _query(conn, set_statement(name, value), "TabSeparated")
            if tenants is not None:
                _limit_to(conn, request, tenants)
            elif request.readonly and "readonly" not in request.settings:
                _query(conn, "SET readonly = 2", "TabSeparated")
            return _execute(conn, request)
        finally:
            conn.close()

    def run_in_session(self, request: HttpQuery, conn: Any) -> Outcome:
        """On a session's connection: what the statement SETs or creates stays for the
        session's next requests, the URL's database and settings hold for this request
        only (as on a server, where they apply to the query's context)."""
        if request.readonly and not _reads_only(request):
            raise EngineError(READONLY, "Cannot execute query in readonly mode. (READONLY)")
        database = _scalar(conn, "SELECT currentDatabase()") if request.database else ""
        before = _current_settings(conn, list(request.settings))
        try:
            if request.database:
                _query(conn, f"USE {quote_name(request.database)}", "TabSeparated")
            for name, value in request.settings.items():
                _query(conn, set_statement(name, value), "TabSeparated")
            return _execute(conn, request)
        finally:
            for name, (value, changed) in before.items():
                statement = set_statement(name, value) if changed else f"SET {name} = DEFAULT"
                _query(conn, statement, "TabSeparated")
            if database:
                _query(conn, f"USE {quote_name(database)}", "TabSeparated")


def _refuse_outside(conn: Any, request: HttpQuery) -> None:
    kind = "INSERT" if request.insert is not None else statement_kind(request.sql)
    why = tenant_scope.statement_refusal(kind)
    if why is not None:
        raise EngineError(tenant_scope.ACCESS_DENIED, f"Not enough privileges: {why}")


def _limit_to(conn: Any, request: HttpQuery, tenants: tuple[str, ...]) -> None:
    """After the URL's settings: the analyzer on (the tree checked is the tree run), the
    statement's tree checked, the tenant filters set, then readonly so nothing unsets them."""
    _query(conn, "SET enable_analyzer = 1", "TabSeparated")
    catalog = _catalog(conn)
    if statement_kind(request.sql) in tenant_scope.TREE_STATEMENTS:
        explain = f"EXPLAIN QUERY TREE {without_format(request.sql)}"
        tree = _query(conn, explain, "TSVRaw", request.params)
        why = tenant_scope.tree_refusal(tree.bytes().decode(), catalog)
        if why is not None:
            raise EngineError(tenant_scope.ACCESS_DENIED, f"Not enough privileges: {why}")
    filters = tenant_scope.table_filters(catalog, tenants)
    _query(conn, f"SET additional_table_filters = {filters}", "TabSeparated")
    _query(conn, "SET readonly = 1", "TabSeparated")


def _catalog(conn: Any) -> tenant_scope.Catalog:
    database = DEFAULT_DATABASE
    listed = _query(
        conn,
        "SELECT name, engine, "
        f"name IN (SELECT table FROM system.columns WHERE database = {quote_string(database)} "
        f"AND name = {quote_string(tenant_scope.TENANT_COLUMN)}) "
        f"FROM system.tables WHERE database = {quote_string(database)}",
        "JSONCompactEachRow",
    ).bytes()
    rows = [json.loads(line) for line in listed.splitlines() if line.strip()]
    return tenant_scope.Catalog(  # a materialized view is neither: its table is read instead
        database=database,
        tenant_tables=frozenset(
            name for name, engine, tenant in rows if tenant and not engine.endswith("View")
        ),
        views=frozenset(name for name, engine, _ in rows if engine == "View"),
    )


def _execute(conn: Any, request: HttpQuery) -> Outcome:
    if request.insert is not None:
        return _insert(conn, request)
    result = _query(conn, request.sql, request.default_format, request.params)
    body = result.bytes() or b""
    fmt = request.output_format or (request.default_format if body else None)
    return Outcome(body=body, fmt=fmt, summary=_summary(result, len(body)))


def _reads_only(request: HttpQuery) -> bool:
    """What readonly=2 lets a GET run: reading statements, SET and USE."""
    kind = statement_kind(request.sql) if request.insert is None else "INSERT"
    return kind in RESULT_STATEMENTS or kind in ("SET", "USE")


def _scalar(conn: Any, sql: str) -> str:
    return _query(conn, sql, "TabSeparatedRaw").bytes().decode().strip()


def _current_settings(conn: Any, names: list[str]) -> dict[str, tuple[str, bool]]:
    """(value, changed) of each named setting, to put back after the request."""
    if not names:
        return {}
    listed = ", ".join(quote_string(name) for name in names)
    raw = _query(
        conn,
        f"SELECT name, value, changed FROM system.settings WHERE name IN ({listed})",
        "JSONCompactEachRow",
    ).bytes()
    rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return {name: (value, bool(changed)) for name, value, changed in rows}


def quote_name(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _insert(conn: Any, request: HttpQuery) -> Outcome:
    """chdb takes insert data through a file (`INSERT ... FROM INFILE`), as clickhouse-
    connect's own chdb backend does."""
    assert request.insert is not None
    with tempfile.NamedTemporaryFile(prefix="ts-insert-", suffix=".data", delete=False) as tmp:
        tmp.write(request.insert.data)
    try:
        sql = request.insert.infile_sql(tmp.name)
        result = _query(conn, sql, "TabSeparated", request.params)
        return Outcome(body=b"", fmt=None, summary=_summary(result, 0))
    finally:
        os.unlink(tmp.name)


def _query(conn: Any, sql: str, fmt: str, params: dict[str, str] | None = None) -> Any:
    try:
        return conn.query(sql, fmt, params=params or {})
    except Exception as err:  # chdb raises ChdbError (a RuntimeError) with the engine text
        message = str(err)
        raise EngineError(error_code(message), message) from None


def _summary(result: Any, result_bytes: int) -> dict[str, str]:
    """X-ClickHouse-Summary's keys (strings, as a server sends them). chdb's `rows_read` is
    the result's rows; what the query read from tables is `storage_rows_read`."""
    return {
        "read_rows": str(result.storage_rows_read()),
        "read_bytes": str(result.storage_bytes_read()),
        "written_rows": str(result.rows_written()),
        "written_bytes": str(result.bytes_written()),
        "total_rows_to_read": str(result.storage_rows_read()),
        "result_rows": str(result.rows_read()),
        "result_bytes": str(result_bytes),
        "elapsed_ns": str(int(result.elapsed() * 1e9)),
    }
