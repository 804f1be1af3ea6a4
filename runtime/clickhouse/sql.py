"""`python -m runtime.clickhouse.sql "SELECT ..."`: run SQL and print an aligned table.

Goes through `analyst_client`: the real server when TURNSTREAM_CLICKHOUSE_URL is set, the
sink's HTTP interface while the stack runs, the embedded engine while it does not.
`--format csv|tsv|json` prints the engine's own output instead (CSVWithNames,
TabSeparatedWithNames, JSONEachRow), as does a query ending in its own FORMAT clause.
`-f file.sql` reads the SQL from a file, and a query of `-` from stdin. A statement without
a result set (CREATE, INSERT, ...) prints `Ok.`. A ClickHouse error prints its message and
exits with 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError

from runtime.clickhouse.client import analyst_client
from runtime.clickhouse.http_protocol import explicit_format, produces_result
from runtime.settings import Settings

RAW_FORMATS = {"csv": "CSVWithNames", "tsv": "TabSeparatedWithNames", "json": "JSONEachRow"}
ERROR_EXIT = 2


def render_table(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Column names, a rule, the rows (numbers right-aligned), then the row count."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(names)]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(names))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(names)), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, bytes):
        return value.decode(errors="backslashreplace")
    text = str(value)
    return text.replace("\n", "\\n").replace("\t", "\\t")


def clickhouse_message(error: Exception) -> str:
    """The server's own words (`Code: N. DB::Exception: ...`), without the client's framing
    ("Received ClickHouse exception, ... (for url ...)")."""
    text = str(error)
    at = text.find("Code: ")
    if at >= 0:
        text = text[at:]
    cut = text.rfind(" (for url ")
    return (text[:cut] if cut >= 0 else text).strip()


def read_sql(query: str | None, file: str | None) -> str:
    if file is not None:
        with open(file) as handle:
            text = handle.read()
    elif query == "-":
        text = sys.stdin.read()
    else:
        text = query or ""
    return text.strip().rstrip(";").strip()


def run(client: Any, sql: str, fmt: str) -> str:
    """What to print for `sql` (raises ClickHouseError)."""
    if explicit_format(sql) is not None:
        return client.raw_query(sql).decode(errors="backslashreplace").rstrip("\n")
    if not produces_result(sql):
        client.command(sql)
        return "Ok."
    if fmt in RAW_FORMATS:
        return client.raw_query(sql, fmt=RAW_FORMATS[fmt]).decode().rstrip("\n")
    result = client.query(sql)
    return render_table(result.column_names, result.result_rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("query", nargs="?", help="the SQL (`-`: read it from stdin)")
    parser.add_argument("-f", "--file", help="read the SQL from this file")
    parser.add_argument("--format", choices=["table", *RAW_FORMATS], default="table")
    args = parser.parse_args(argv)
    if (args.query is None) == (args.file is None):
        parser.error("give the SQL (or `-` for stdin) or -f FILE")
    sql = read_sql(args.query, args.file)
    if not sql:
        parser.error("no SQL given")
    try:
        client = analyst_client(Settings.from_env())
        print(run(client, sql, args.format))
    except ClickHouseError as err:
        print(clickhouse_message(err), file=sys.stderr)
        return ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
