"""Who may use the sink's ClickHouse HTTP interface: whoever holds its password, given the
ways ClickHouse's own server takes one (HTTP basic auth, which clickhouse-connect sends; the
X-ClickHouse-User/-Key headers; `user`/`password` URL parameters). `/ping` stays open, as on
a server, and says nothing about the data.

The password is TURNSTREAM_CLICKHOUSE_HTTP_PASSWORD when set; otherwise one generated on
first use and kept in `$TURNSTREAM_HOME/clickhouse-http.password`, readable by its owner
only, where the local analyst tools (`analyst_client`, `python -m runtime.clickhouse.sql`)
find it: other users of a shared machine cannot read the data even though the port is open
to them. Analysts limited to some tenants have their own users (`analysts`).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from runtime.clickhouse.analysts import Analyst, Credential
from runtime.settings import Settings

USER = "default"  # the user clickhouse-connect and clickhouse-client name by default
PASSWORD_FILE = "clickhouse-http.password"
AUTHENTICATION_FAILED = 516  # ClickHouse's code (HTTP 401)


def presented(headers: Mapping[str, str], params: Mapping[str, str]) -> tuple[str, str] | None:
    """The (user, password) a request offers, in ClickHouse's order of precedence."""
    auth = headers.get("Authorization", "")
    if auth.startswith("Basic "):
        try:
            user, _, password = base64.b64decode(auth[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return user, password
    if "X-ClickHouse-User" in headers or "X-ClickHouse-Key" in headers:
        return headers.get("X-ClickHouse-User", USER), headers.get("X-ClickHouse-Key", "")
    if "user" in params or "password" in params:
        return params.get("user", USER), params.get("password", "")
    return None


def allowed(offered: tuple[str, str] | None, password: str) -> bool:
    """Constant-time check of the offer against the one user and its password."""
    if offered is None:
        return False
    user, given = offered
    same = hmac.compare_digest(given.encode(), password.encode())
    return same and user == USER


def identify(
    offered: tuple[str, str] | None, password: str, analysts: Mapping[str, Credential]
) -> Analyst | None:
    """Who the offer proves to be: `default` (every tenant), a tenant-limited analyst of
    `analysts`, or nobody."""
    if offered is None:
        return None
    if allowed(offered, password):
        return Analyst(USER)
    user, given = offered
    credential = analysts.get(user)
    if credential is not None and credential.opens(given):
        return Analyst(user, credential.tenants)
    return None


def local_password(settings: Settings) -> str:
    """The interface's password: from the environment, or this home's generated one."""
    if settings.clickhouse_http_password:
        return settings.clickhouse_http_password
    path = Path(settings.state_dir) / PASSWORD_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    try:  # O_EXCL: two processes starting at once agree on the first one written
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as file:
        file.write(password + "\n")
    return password
