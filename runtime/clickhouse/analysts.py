"""The ClickHouse interface's analysts who may see some tenants only: each has a user name,
the SHA-256 of a password and the tenants whose rows it may read (`tenant_scope` says how
that is enforced). User `default` (`http_auth`) sees everything.

    python -m runtime.clickhouse.analysts add acme_analyst --tenant acme   # prints a password
    python -m runtime.clickhouse.analysts list
    python -m runtime.clickhouse.analysts remove acme_analyst
    python -m runtime.clickhouse.analysts sql acme_analyst   # the same limit on a server

The file (`TURNSTREAM_CLICKHOUSE_ANALYSTS_FILE`, else `$TURNSTREAM_HOME/clickhouse-
analysts.json`) holds no password, only hashes, and is written owner-readable. The sink
reads it on each request, so a change takes effect without a restart.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.clickhouse.tenant_scope import SERVER_TENANT_TABLES, row_policy_sql
from runtime.settings import Settings

ANALYSTS_FILE = "clickhouse-analysts.json"


@dataclass(frozen=True, slots=True)
class Analyst:
    """Who a request is: `tenants` None sees every row, else only those tenants' rows."""

    user: str
    tenants: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Credential:
    user: str
    password_sha256: str
    tenants: tuple[str, ...]

    def opens(self, password: str) -> bool:
        return hmac.compare_digest(_digest(password), self.password_sha256)


def _digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def analysts_path(settings: Settings) -> Path:
    if settings.clickhouse_analysts_file:
        return Path(settings.clickhouse_analysts_file)
    return Path(settings.state_dir) / ANALYSTS_FILE


def load(path: Path) -> dict[str, Credential]:
    """The credentials by user; none when the file does not exist."""
    try:
        entries = json.loads(path.read_text())["analysts"]
    except FileNotFoundError:
        return {}
    return {
        e["user"]: Credential(e["user"], e["password_sha256"], tuple(e["tenants"])) for e in entries
    }


def save(path: Path, credentials: dict[str, Credential]) -> None:
    entries = [
        {"user": c.user, "password_sha256": c.password_sha256, "tenants": list(c.tenants)}
        for c in sorted(credentials.values(), key=lambda c: c.user)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump({"analysts": entries}, file, indent=1)
    temporary.replace(path)


def add(path: Path, user: str, tenants: list[str]) -> str:
    """Adds (or replaces) `user`; returns its new password, which is kept nowhere."""
    if not user.isidentifier() or user == "default":
        raise ValueError(f"user name {user!r}: letters, digits and _, not 'default'")
    if not tenants:
        raise ValueError("an analyst needs at least one tenant")
    password = secrets.token_urlsafe(24)
    credentials = load(path)
    credentials[user] = Credential(user, _digest(password), tuple(sorted(set(tenants))))
    save(path, credentials)
    return password


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.clickhouse.analysts")
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add", help="add an analyst limited to tenants")
    adding.add_argument("user")
    adding.add_argument("--tenant", action="append", required=True)
    commands.add_parser("list", help="the analysts and their tenants")
    removing = commands.add_parser("remove", help="remove an analyst")
    removing.add_argument("user")
    server = commands.add_parser("sql", help="the row policies that limit it on a server")
    server.add_argument("user")
    args = parser.parse_args(argv)
    path = analysts_path(Settings.from_env())
    if args.command == "add":
        try:
            password = add(path, args.user, args.tenant)
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
        print(f"user {args.user}, tenants {', '.join(sorted(set(args.tenant)))}")
        print(f"password (shown once): {password}")
    elif args.command == "list":
        for listed in load(path).values():
            print(f"{listed.user}\t{','.join(listed.tenants)}")
    elif args.command == "sql":
        credential = load(path).get(args.user)
        if credential is None:
            print(f"no analyst {args.user}", file=sys.stderr)
            return 2
        from runtime.clickhouse.client import DEFAULT_DATABASE  # the client imports this module

        tables = list(SERVER_TENANT_TABLES)
        print(row_policy_sql(DEFAULT_DATABASE, credential.user, credential.tenants, tables))
    else:
        credentials = load(path)
        if credentials.pop(args.user, None) is None:
            print(f"no analyst {args.user}", file=sys.stderr)
            return 2
        save(path, credentials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
