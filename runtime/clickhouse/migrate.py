"""Apply the versioned ClickHouse migrations in `runtime/clickhouse/migrations/` (idempotent).

Files are named `NNNN_description.sql`; statements are separated by `;` at a line end and
may use `{db}` for the database. Applied versions are recorded with a checksum in
`{db}.schema_migrations`; an applied file that changed afterwards is an error (write a new
migration instead). `python -m runtime.clickhouse.migrate [--database DB] [--status]`
"""

from __future__ import annotations

import argparse
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from clickhouse_connect.driver.client import Client

from runtime.clickhouse.client import DEFAULT_DATABASE, connect
from runtime.errors import PlumbingError
from runtime.settings import Settings

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(PlumbingError, RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def statements(self, database: str) -> list[str]:
        body = "\n".join(
            line for line in self.sql.splitlines() if not line.lstrip().startswith("--")
        )
        parts = re.split(r";\s*$", body, flags=re.M)
        return [p.strip().replace("{db}", database) for p in parts if p.strip()]


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"bad migration file name {path.name} (want NNNN_name.sql)")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {directory}")
    return found


def applied(client: Client, database: str) -> dict[int, str]:
    client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    client.command(
        f"CREATE TABLE IF NOT EXISTS {database}.schema_migrations ("
        " version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC')"
        ") ENGINE = ReplacingMergeTree ORDER BY version"
    )
    rows = client.query(f"SELECT version, checksum FROM {database}.schema_migrations FINAL")
    return {int(v): c for v, c in rows.result_rows}


def migrate(client: Client, database: str = DEFAULT_DATABASE) -> list[Migration]:
    """Apply pending migrations in order; return the ones applied now."""
    done = applied(client, database)
    ran = []
    for migration in load_migrations():
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationError(
                    f"migration {migration.version}_{migration.name} changed after it was "
                    "applied; add a new migration instead"
                )
            continue
        for statement in migration.statements(database):
            client.command(statement)
        client.insert(
            f"{database}.schema_migrations",
            [[migration.version, migration.name, migration.checksum, datetime.now(UTC)]],
            column_names=["version", "name", "checksum", "applied_at"],
        )
        ran.append(migration)
    return ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", default=DEFAULT_DATABASE)
    args = parser.parse_args()
    settings = Settings.from_env()
    client = connect(settings)
    ran = migrate(client, args.database)
    where = settings.clickhouse_url or f"embedded chdb at {settings.state_path / 'clickhouse'}"
    for m in ran:
        print(f"  applied {m.version:04d}_{m.name}")
    print(f"ClickHouse schema up to date ({where}, {len(load_migrations())} migrations)")


if __name__ == "__main__":
    main()
