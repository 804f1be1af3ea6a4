"""A ClickHouse client: a real server when TURNSTREAM_CLICKHOUSE_URL is set, else the
embedded engine (chdb) over the data directory under TURNSTREAM_HOME.

chdb allows one process per data directory ("Cannot lock file .../status" for a second):
the process that writes traces owns it; others query through it or use a real server.
`analyst_client` picks the way in that works right now: the server, the sink's HTTP
interface while the sink runs, or the engine itself while it does not.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from runtime.clickhouse.http_auth import USER, local_password
from runtime.settings import Settings

DEFAULT_DATABASE = "turnstream"
SINK_HTTP_HOST = "127.0.0.1"
# The sink's /ping names the data directory it serves, so a client never takes another
# stack's sink (another TURNSTREAM_HOME on the same port) for its own.
LOCATION_HEADER = "X-Turnstream-ClickHouse-Path"


def embedded_path(settings: Settings) -> Path:
    return settings.state_path / "clickhouse"


def embedded_location(settings: Settings) -> str:
    """The data directory, created, spelled as chdb needs it: chdb compares engine paths
    literally, and every client of one process must name the same one."""
    path = embedded_path(settings)
    path.mkdir(parents=True, exist_ok=True)
    return os.path.realpath(path)


def connect(settings: Settings) -> Client:
    """The writer's client. Against a server it carries no session: the sink runs its
    routes' inserts and offset reads on several threads at once, and clickhouse-connect
    refuses concurrent queries in one session (found when a replay's sink first wrote
    through an HTTP interface)."""
    if settings.clickhouse_url:
        return clickhouse_connect.get_client(
            dsn=settings.clickhouse_url, autogenerate_session_id=False
        )
    return clickhouse_connect.get_client(dsn=f"chdb://{embedded_location(settings)}")


def sink_http_answers(settings: Settings, timeout_s: float = 1.0) -> bool:
    """Whether the sink of this TURNSTREAM_HOME serves the HTTP interface on its port."""
    if not settings.clickhouse_http_port:
        return False
    url = f"http://{SINK_HTTP_HOST}:{settings.clickhouse_http_port}/ping"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    try:
        with opener.open(url, timeout=timeout_s) as response:
            served = response.headers.get(LOCATION_HEADER)
            return response.status == 200 and served == embedded_location(settings)
    except OSError:
        return False


def analyst_client(settings: Settings) -> Client:
    """For reading (and ad-hoc writing) by people and reports: the real server if
    TURNSTREAM_CLICKHOUSE_URL is set; else the running sink's HTTP interface; else the
    embedded engine directly (the sink is not running, so its directory is free)."""
    if settings.clickhouse_url:
        return clickhouse_connect.get_client(dsn=settings.clickhouse_url)
    if sink_http_answers(settings):
        return clickhouse_connect.get_client(
            host=SINK_HTTP_HOST,
            port=settings.clickhouse_http_port,
            username=USER,
            password=local_password(settings),
            compress=False,
        )
    return connect(settings)
