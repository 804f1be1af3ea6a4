from runtime.clickhouse.migrate import Migration, load_migrations


def test_migrations_are_numbered_and_split_into_statements():
    migrations = load_migrations()
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    assert migrations[0].version == 1
    for m in migrations:
        statements = m.statements("somedb")
        assert statements and all("{db}" not in s for s in statements)


def test_statement_splitting_ignores_comments_and_semicolons_inside_lines():
    m = Migration(
        9,
        "x",
        "-- a comment; with a semicolon\nCREATE TABLE {db}.a (s String DEFAULT ';');\nSELECT 1;\n",
    )
    assert m.statements("d") == ["CREATE TABLE d.a (s String DEFAULT ';')", "SELECT 1"]


def test_released_migrations_never_change():
    """An edited migration breaks every database that ran it (and CI's, which persists):
    the lock file pins each one's checksum; a new migration adds its line."""
    from pathlib import Path

    lock = Path(__file__).resolve().parents[3] / "runtime" / "clickhouse" / "migrations.lock"
    pinned = dict(
        line.split() for line in lock.read_text().splitlines() if line and not line.startswith("#")
    )
    current = {f"{m.version:04d}": m.checksum for m in load_migrations()}
    assert current == pinned, "a released migration changed, or a new one is not in the lock"
