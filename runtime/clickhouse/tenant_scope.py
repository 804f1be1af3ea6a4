"""What an analyst limited to some tenants may read through the embedded engine, which has
no users or row policies of its own (chdb runs as one user). The equivalent, per request:

- every table of the database with a `tenant_id` column is read through
  `additional_table_filters` (`tenant_id IN (...)`), which the engine applies wherever the
  table is read, inside views and subqueries too; then `readonly = 1`, so the statement
  cannot change that setting (nor write, nor reach files, URLs or other servers);
- before it runs, the statement's query tree (`EXPLAIN QUERY TREE`, the engine's own
  parser and analyzer) may name only the database's tenant tables, its views, its infra
  tables and metadata tables of `system`; table functions that read around the filters
  (`merge`, `mergeTreeIndex`, ...) and scalar functions that read files are refused.

A refusal is ClickHouse's ACCESS_DENIED (497). On a real server the same limit is a row
policy per analyst (`row_policy_sql`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.clickhouse.http_protocol import quote_string

ACCESS_DENIED = 497
TENANT_COLUMN = "tenant_id"
INFRA_TABLES = frozenset({"worker_metrics"})  # per worker, no tenant's data
# the database's tables with a tenant column (a test checks them against the migrations)
SERVER_TENANT_TABLES = ("events", "feedback", "traces", "traces_daily_users", "turns")
SYSTEM_TABLES = frozenset(
    {
        "one", "numbers", "numbers_mt", "zeros", "zeros_mt", "settings", "functions",
        "data_type_families", "table_engines", "formats", "databases", "tables", "columns",
        "time_zones", "collations", "aggregate_function_combinators", "keywords",
        "build_options",
    }
)  # fmt: skip
TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generateSeries", "generate_series",
     "values", "view", "null"}
)  # fmt: skip
READING_FUNCTIONS = re.compile(r"^(file|joinGet|joinGetOrNull|dictGet\w*|dictHas\w*)$")
# statements that read no rows of a table (their table checks are the engine's own)
METADATA_STATEMENTS = frozenset({"SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"})
TREE_STATEMENTS = frozenset({"SELECT", "WITH", "("})

_TABLE = re.compile(r"\bTABLE id: \d+[^\n]*?table_name: ([^\s,]+)")
_TABLE_FUNCTION = re.compile(r"\bTABLE_FUNCTION id: \d+[^\n]*?table_function_name: ([^\s,]+)")
_FUNCTION = re.compile(r"\bFUNCTION id: \d+[^\n]*?function_name: ([^\s,]+)")


@dataclass(frozen=True, slots=True)
class Catalog:
    """What the analysts' database holds: tables with a tenant column, and views."""

    database: str
    tenant_tables: frozenset[str]  # bare table names
    views: frozenset[str]


def table_filters(catalog: Catalog, tenants: tuple[str, ...]) -> str:
    """The `additional_table_filters` value: each tenant table read for `tenants` only."""
    listed = ", ".join(quote_string(tenant) for tenant in tenants) or "NULL"
    condition = quote_string(f"{TENANT_COLUMN} IN ({listed})")
    entries = ", ".join(
        f"{quote_string(f'{catalog.database}.{table}')}: {condition}"
        for table in sorted(catalog.tenant_tables)
    )
    return "{" + entries + "}"


def statement_refusal(kind: str) -> str | None:
    """Why a statement of this kind is refused before its tree is read (None: it is not)."""
    if kind in TREE_STATEMENTS or kind in METADATA_STATEMENTS:
        return None
    return f"a tenant-limited analyst may only read (not {kind or 'an empty statement'})"


def tree_refusal(tree: str, catalog: Catalog) -> str | None:
    """Why the statement whose `EXPLAIN QUERY TREE` is `tree` is refused (None: it may run)."""
    for name in _TABLE.findall(tree):
        database, _, table = name.rpartition(".")
        if database == "system" and table in SYSTEM_TABLES:
            continue
        if database == catalog.database and (
            table in catalog.tenant_tables or table in catalog.views or table in INFRA_TABLES
        ):
            continue
        return f"table {name} is not readable by a tenant-limited analyst"
    for function in _TABLE_FUNCTION.findall(tree):
        if function not in TABLE_FUNCTIONS:
            return f"table function {function} is not allowed to a tenant-limited analyst"
    for function in _FUNCTION.findall(tree):
        if READING_FUNCTIONS.match(function):
            return f"function {function} is not allowed to a tenant-limited analyst"
    return None


def row_policy_sql(database: str, user: str, tenants: tuple[str, ...], tables: list[str]) -> str:
    """The same limit on a ClickHouse server: a row policy per tenant table, read-only."""
    listed = ", ".join(quote_string(t) for t in tenants)
    lines = [f"CREATE USER IF NOT EXISTS {user} IDENTIFIED WITH sha256_password BY '<password>';"]
    lines += [
        f"CREATE ROW POLICY IF NOT EXISTS {user}_{table} ON {database}.{table} "
        f"USING {TENANT_COLUMN} IN ({listed}) TO {user};"
        for table in tables
    ]
    lines.append(f"GRANT SELECT ON {database}.* TO {user};")
    lines.append(f"ALTER USER {user} SETTINGS readonly = 1;")
    return "\n".join(lines)
