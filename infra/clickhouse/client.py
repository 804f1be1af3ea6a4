"""A ClickHouse client: a real server when TURNSTREAM_CLICKHOUSE_URL is set, else the
embedded engine (chdb) over the data directory under TURNSTREAM_HOME.

chdb allows one process per data directory ("Cannot lock file .../status" for a second):
the process that writes traces owns it; others query through it or use a real server.
"""

from __future__ import annotations

from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from schemas.settings import Settings

DEFAULT_DATABASE = "turnstream"


def embedded_path(settings: Settings) -> Path:
    return settings.state_path / "clickhouse"


def connect(settings: Settings) -> Client:
    if settings.clickhouse_url:
        return clickhouse_connect.get_client(dsn=settings.clickhouse_url)
    path = embedded_path(settings)
    path.mkdir(parents=True, exist_ok=True)
    return clickhouse_connect.get_client(dsn=f"chdb://{path.resolve()}")
