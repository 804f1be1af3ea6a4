"""The ClickHouse HTTP interface on 127.0.0.1, served by the sink process over its embedded
engine: chdb lets one process own a data directory, so while the sink runs this is how
analysts (`python -m runtime.clickhouse.sql`, clickhouse-connect, curl) reach the data.

It implements what clickhouse-connect's HTTP client uses: `GET /ping`; queries by GET or
POST on `/` (the `query` URL parameter and/or the body; `database`, `default_format`,
`query_id`, `param_<name>` bind parameters, settings as URL parameters, form-encoded
queries); inserts (`INSERT ... FORMAT X` then the data, lz4/zstd/gzip/deflate request
bodies); the X-ClickHouse-Format/-Timezone/-Query-Id/-Summary headers; errors as
`Code: N. DB::Exception: ...` with X-ClickHouse-Exception-Code. Authentication: one user
and its password (`http_auth`: basic auth, X-ClickHouse-User/-Key or URL parameters, as a
server takes them); `/ping` is open. Not implemented: other users and their grants,
sessions, external data, progress headers, response compression (a server may ignore
Accept-Encoding). Results are materialized before they are sent.

Engine calls block, so they run on a small thread pool of their own: analysts' queries run
in parallel (one chdb connection each, see `http_engine`) without blocking the event loop
or taking the default executor's threads, which the sink's inserts use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from runtime.clickhouse.client import LOCATION_HEADER, embedded_location
from runtime.clickhouse.http_auth import (
    AUTHENTICATION_FAILED,
    USER,
    allowed,
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
from runtime.settings import Settings
from workers.sink.http.engine import EmbeddedEngine, EngineError

log = logging.getLogger("turnstream.clickhouse_http")

HOST = "127.0.0.1"
QUERY_THREADS = 4  # analysts' queries at once; more wait for a thread
MAX_BODY_BYTES = 512 * 1024 * 1024  # one request, compressed (larger: 413)

ENGINE = web.AppKey("engine", EmbeddedEngine)
EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
PASSWORD = web.AppKey("password", str)


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
    app[ENGINE] = engine
    app[EXECUTOR] = executor
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
        engine.close()


@web.middleware
async def _authenticated(request: web.Request, handler) -> web.StreamResponse:
    """Every path but /ping needs the password; a refusal is ClickHouse-shaped (516, 401)."""
    if request.path == "/ping":
        return await handler(request)
    if allowed(presented(request.headers, request.query), request.app[PASSWORD]):
        return await handler(request)
    message = f"{USER}: Authentication failed: password is incorrect, or there is no such user"
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
        parsed = parse_request(request.method, params, body, query_id)
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(request.app[EXECUTOR], engine.run, parsed)
    except (RequestError, EngineError) as err:
        return _error(err.number, err.message, headers)
    except Exception as err:  # ours, not the engine's: still a ClickHouse-shaped answer
        log.exception("clickhouse http request failed")
        return _error(STD_EXCEPTION, f"{type(err).__name__}: {err}", headers)
    headers["X-ClickHouse-Summary"] = json.dumps(outcome.summary, separators=(",", ":"))
    if outcome.fmt is not None:
        headers["X-ClickHouse-Format"] = outcome.fmt
    headers["Content-Type"] = content_type(outcome.fmt)
    return web.Response(body=outcome.body, headers=headers)


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
    if request.content_type == "multipart/form-data":  # not url-encoded: `curl -d` is SQL
        for name, value in (await request.post()).items():
            if not isinstance(value, str):
                raise RequestError(48, "External data (file fields) is not supported")
            params.append((name, value))
        return params, b""
    body = await request.read()
    return params, decompress_body(body, request.headers.get("Content-Encoding", ""))
