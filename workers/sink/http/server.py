"""The ClickHouse HTTP interface on 127.0.0.1, served by the sink process over its embedded
engine: chdb lets one process own a data directory, so while the sink runs this is how
analysts (`python -m runtime.clickhouse.sql`, clickhouse-connect, curl) reach the data.

It implements what clickhouse-connect, clickhouse-go (HTTP), @clickhouse/client and curl
use: `GET /ping`; queries by GET or POST on `/` (the `query` URL parameter and/or the
body; `database`, `default_format`, `query_id`, `param_<name>` bind parameters, settings
as URL parameters, form-encoded queries); inserts (`INSERT ... FORMAT X` then the data,
lz4/zstd/gzip/deflate request bodies); sessions; ClickHouse's compressed blocks both ways
(`compress`, `decompress`); Native at the client's `client_protocol_version`; answers
compressed on `enable_http_compression=1`; the X-ClickHouse-Format/-Timezone/-Query-Id/
-Summary/-Progress headers; errors as `Code: N. DB::Exception: ...` with
X-ClickHouse-Exception-Code (`http_transport` says how each parameter is served or
refused). Authentication: one user and its password (`http_auth`: basic auth,
X-ClickHouse-User/-Key or URL parameters, as a server takes them); `/ping` is open. Not
implemented: other users and their grants, external data (refused). Results are
materialized before they are sent, as with `wait_end_of_query=1`.

Engine calls block, so they run on a small thread pool of their own: analysts' queries run
in parallel (one chdb connection each, see `http_engine`) without blocking the event loop
or taking the default executor's threads, which the sink's inserts use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web

from runtime.clickhouse import compressed_blocks
from runtime.clickhouse.analysts import Analyst, analysts_path
from runtime.clickhouse.analysts import load as load_analysts
from runtime.clickhouse.client import LOCATION_HEADER, embedded_location
from runtime.clickhouse.http_auth import (
    AUTHENTICATION_FAILED,
    USER,
    identify,
    local_password,
    presented,
)
from runtime.clickhouse.http_protocol import (
    STD_EXCEPTION,
    RequestError,
    content_type,
    decompress_body,
    error_body,
    http_status,
    parse_request,
)
from runtime.clickhouse.http_transport import Transport, http_compress, transport_of
from runtime.clickhouse.native_revision import at_revision
from runtime.settings import Settings
from workers.sink.http.engine import EmbeddedEngine, EngineError, Outcome
from workers.sink.http.sessions import Sessions

log = logging.getLogger("turnstream.clickhouse_http")

HOST = "127.0.0.1"
QUERY_THREADS = 4  # analysts' queries at once; more wait for a thread
MAX_BODY_BYTES = 512 * 1024 * 1024  # one request, compressed (larger: 413)

ENGINE = web.AppKey("engine", EmbeddedEngine)
EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
PASSWORD = web.AppKey("password", str)
SESSIONS = web.AppKey("sessions", Sessions)
ANALYSTS_FILE = web.AppKey("analysts_file", Path)
ANALYST = web.RequestKey("analyst", Analyst)
_HEADER_PARAMS = (
    ("X-ClickHouse-Database", "database"),
    ("X-ClickHouse-Format", "default_format"),
    ("X-ClickHouse-Quota", "quota_key"),
)


def serves_http(settings: Settings) -> bool:
    """The sink serves the interface when the engine is embedded and the port is not 0."""
    return not settings.clickhouse_url and settings.clickhouse_http_port != 0


@contextlib.asynccontextmanager
async def serve_http(settings: Settings) -> AsyncIterator[str]:
    """Serve on 127.0.0.1:`clickhouse_http_port` until the block ends; yields the URL."""
    engine = await asyncio.to_thread(EmbeddedEngine, embedded_location(settings))
    executor = ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="clickhouse-http")
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_authenticated])
    app[PASSWORD] = await asyncio.to_thread(local_password, settings)
    app[ANALYSTS_FILE] = analysts_path(settings)
    app[ENGINE] = engine
    app[EXECUTOR] = executor
    app[SESSIONS] = sessions = Sessions(engine.connect)
    app.router.add_get("/ping", _ping)
    app.router.add_get("/", _query)
    app.router.add_post("/", _query)
    # aiohttp would undo gzip/deflate/zstd itself but not lz4: decode all in one place
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, settings.clickhouse_http_port).start()
        yield f"http://{HOST}:{settings.clickhouse_http_port}"
    finally:
        await runner.cleanup()
        await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        sessions.close()
        engine.close()


@web.middleware
async def _authenticated(request: web.Request, handler) -> web.StreamResponse:
    """Every path but /ping needs a user's password: `default`'s, or a tenant-limited
    analyst's (read from its file on each request, so changes need no restart); a
    refusal is ClickHouse-shaped (516, 401)."""
    if request.path == "/ping":
        return await handler(request)
    offered = presented(request.headers, request.query)
    credentials = await asyncio.to_thread(load_analysts, request.app[ANALYSTS_FILE])
    analyst = identify(offered, request.app[PASSWORD], credentials)
    if analyst is not None:
        request[ANALYST] = analyst
        return await handler(request)
    user = offered[0] if offered else USER
    message = f"{user}: Authentication failed: password is incorrect, or there is no such user"
    return _error(AUTHENTICATION_FAILED, message, {})


async def _ping(request: web.Request) -> web.Response:
    return web.Response(text="Ok.\n", headers={LOCATION_HEADER: request.app[ENGINE].location})


async def _query(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    query_id = request.query.get("query_id") or str(uuid.uuid4())
    headers = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": engine.timezone}
    try:
        params, body = await _read(request)
        if request.method == "GET" and not body and "query" not in request.query:
            return web.Response(text="Ok.\n", headers=headers)  # as a server answers GET /
        transport = transport_of(dict(params), request.headers.get("Accept-Encoding", ""))
        if transport.session is not None:
            headers["X-ClickHouse-Session-Id"] = transport.session.session_id
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(
            request.app[EXECUTOR],
            functools.partial(
                _answer,
                engine,
                request.app[SESSIONS],
                method=request.method,
                params=params,
                body=body,
                query_id=query_id,
                transport=transport,
                analyst=request[ANALYST],
            ),
        )
    except (RequestError, EngineError) as err:
        return _error(err.number, err.message, headers)
    except Exception as err:  # ours, not the engine's: still a ClickHouse-shaped answer
        log.exception("clickhouse http request failed")
        return _error(STD_EXCEPTION, f"{type(err).__name__}: {err}", headers)
    outcome, payload = answer
    headers["X-ClickHouse-Summary"] = json.dumps(outcome.summary, separators=(",", ":"))
    if transport.progress:  # the answer is materialized: its one progress is the summary
        headers["X-ClickHouse-Progress"] = headers["X-ClickHouse-Summary"]
    if outcome.fmt is not None:
        headers["X-ClickHouse-Format"] = outcome.fmt
    headers["Content-Type"] = content_type(outcome.fmt)
    if transport.http_encoding and payload:
        headers["Content-Encoding"] = transport.http_encoding
    return web.Response(body=payload, headers=headers)


def _answer(
    engine: EmbeddedEngine,
    sessions: Sessions,
    *,
    method: str,
    params: list[tuple[str, str]],
    body: bytes,
    query_id: str,
    transport: Transport,
    analyst: Analyst,
) -> tuple[Outcome, bytes]:
    """Runs on a query thread: undo ClickHouse's framing of the body, run the statement
    (in its session when it names one), and encode the answer as the request asked."""
    if transport.decompress:
        body = compressed_blocks.decompress(body)
    parsed = parse_request(method, params, body, query_id)
    if transport.session is None:
        outcome = engine.run(parsed, analyst.tenants)
    else:
        with sessions.use(transport.session, analyst.user) as conn:
            if analyst.tenants is None:
                outcome = engine.run_in_session(parsed, conn)
            else:  # read-only: nothing it may run would change the session's state
                outcome = engine.run(parsed, analyst.tenants)
    payload = outcome.body
    if transport.revision and outcome.fmt == "Native":
        payload = at_revision(payload, transport.revision)
    if transport.compress and payload:
        payload = compressed_blocks.compress(payload)
    if transport.http_encoding:
        payload = http_compress(payload, transport.http_encoding, transport.zlib_level)
    return outcome, payload


def _error(code: int, message: str, headers: dict[str, str]) -> web.Response:
    headers["X-ClickHouse-Exception-Code"] = str(code)
    return web.Response(
        status=http_status(code),
        text=error_body(code, message),
        headers=headers,
        content_type="text/plain",
    )


async def _read(request: web.Request) -> tuple[list[tuple[str, str]], bytes]:
    """URL parameters (plus multipart form fields, as clickhouse-connect sends large bind
    parameters) and the decompressed body."""
    params = list(request.query.items())
    for header, name in _HEADER_PARAMS:  # as a server reads them, the URL taking precedence
        if header in request.headers and name not in request.query:
            params.append((name, request.headers[header]))
    if request.content_type == "multipart/form-data":  # not url-encoded: `curl -d` is SQL
        for name, value in (await request.post()).items():
            if not isinstance(value, str):
                raise RequestError(48, "External data (file fields) is not supported")
            params.append((name, value))
        return params, b""
    body = await request.read()
    return params, decompress_body(body, request.headers.get("Content-Encoding", ""))
