"""The edge's static files for the web client: the right files with the right headers, 404 for
anything else (traversal attempts included), and WebSocket upgrades left to the protocol."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

from ws_edge.web_assets import WEB_DIR, content_security_policy, process_request


class FakeConnection:
    """What `process_request` uses of a `ServerConnection`: `respond`."""

    def __init__(self) -> None:
        self.protocol = ServerProtocol()

    def respond(self, status: int, text: str) -> Response:
        return self.protocol.reject(status, text)


def get(path: str, **headers: str) -> Response | None:
    request = Request(path, Headers({"Host": "127.0.0.1:8765", **headers}))
    return process_request(FakeConnection(), request)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "name", "content_type"),
    [
        ("/", "index.html", "text/html; charset=utf-8"),
        ("/?token=abc.def.ghi", "index.html", "text/html; charset=utf-8"),
        ("/index.html", "index.html", "text/html; charset=utf-8"),
        ("/app.js", "app.js", "text/javascript; charset=utf-8"),
        ("/style.css", "style.css", "text/css; charset=utf-8"),
    ],
)
def test_serves_the_client_files(path: str, name: str, content_type: str) -> None:
    response = get(path)
    assert response is not None
    assert response.status_code == 200
    assert response.body == (WEB_DIR / name).read_bytes()
    assert response.headers.get_all("Content-Type") == [content_type]
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert int(response.headers["Content-Length"]) == len(response.body)


def test_the_policy_allows_only_the_page_s_own_origin() -> None:
    response = get("/")
    assert response is not None
    header = response.headers["Content-Security-Policy"]
    policy = dict(part.strip().split(" ", 1) for part in header.split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no other host
    assert policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self' ws://127.0.0.1:8765 wss://127.0.0.1:8765"
    assert policy["frame-ancestors"] == "'none'"


def test_an_odd_host_header_is_not_repeated_in_the_policy() -> None:
    policy = content_security_policy("evil.example; script-src *")
    assert "evil" not in policy and "connect-src 'self';" in policy
    assert "ws://[::1]:80 " in content_security_policy("[::1]:80")


def test_the_page_loads_only_its_own_files() -> None:
    """No inline script or style (the policy forbids them) and nothing from another host."""
    html = (WEB_DIR / "index.html").read_text()
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    for text in (html, (WEB_DIR / "app.js").read_text(), (WEB_DIR / "style.css").read_text()):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text


@pytest.mark.parametrize(
    "path",
    [
        "/../schemas/settings.py",
        "/%2e%2e/schemas/settings.py",
        "/%2E%2E%2Fschemas%2Fsettings.py",
        "/..%2f..%2fpyproject.toml",
        "/app.js/../../schemas/settings.py",
        "/web/app.js",
        "//etc/passwd",
        "/./app.js",
        "/web_assets.py",
        "/favicon.ico",
        "/index.htm",
        "/APP.JS",
    ],
)
def test_anything_else_is_not_found(path: str) -> None:
    response = get(path)
    assert response is not None
    assert response.status_code == 404
    assert response.body == b"not found\n"
    assert "Content-Security-Policy" in response.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Upgrade": "websocket", "Connection": "Upgrade"},
        {"Upgrade": "WebSocket", "Connection": "keep-alive, Upgrade"},
        {"Upgrade": "h2c, websocket", "Connection": "Upgrade"},
    ],
)
@pytest.mark.parametrize("path", ["/", "/?token=x", "/app.js", "/anything"])
def test_websocket_upgrades_go_on_to_the_protocol(path: str, headers: dict[str, str]) -> None:
    assert get(path, **headers) is None


async def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()  # the server closes after a plain HTTP response
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


async def test_a_real_server_serves_the_page_and_still_speaks_websocket() -> None:
    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with serve(echo, "127.0.0.1", 0, process_request=process_request) as server:
        port = server.sockets[0].getsockname()[1]
        status, headers, body = await http_get(port, "/?token=t")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert body == (WEB_DIR / "index.html").read_bytes()
        status, _, _ = await http_get(port, "/%2e%2e/pyproject.toml")
        assert status == 404
        async with connect(f"ws://127.0.0.1:{port}/?token=t") as ws:
            await ws.send(json.dumps({"type": "ping"}))
            assert json.loads(await ws.recv()) == {"type": "ping"}
