"""The web client's static files, served by the edge on its WebSocket port.

The page must come from the same host and port as the WebSocket so that its strict
Content-Security-Policy (self only) lets it connect, and so that a deployment needs no second
server. `process_request` is the `websockets` hook that runs before the opening handshake:
an upgrade request goes on to the protocol (on any path), a plain GET of one of the few
known files gets that file, anything else a 404. Only the names in `ASSETS` are ever read,
from `WEB_DIR`, so no request path can reach another file (no traversal, encoded or not).
"""

from __future__ import annotations

import http
import re
from pathlib import Path
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

WEB_DIR = Path(__file__).resolve().parent / "web"

# URL path -> (file in WEB_DIR, Content-Type); nothing else is served
ASSETS: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}

# a Host header we are willing to repeat in the policy (host or [v6], optional port)
_HOST = re.compile(r"^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$")

_cache: dict[str, str] = {}


def content_security_policy(host: str | None) -> str:
    """Self only: scripts, styles and the WebSocket of the page's own origin (ws: and wss:
    spelled out, as browsers before CSP 3 did not count them as 'self'); images and audio
    the page makes itself (data:, blob:); no frames, plugins, forms or base changes."""
    connect = "'self'"
    if host is not None and _HOST.match(host):
        connect += f" ws://{host} wss://{host}"
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "media-src 'self' blob:",
            f"connect-src {connect}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ]
    )


def is_upgrade(request: Request) -> bool:
    """A WebSocket opening handshake (`Upgrade: websocket`, possibly among others)."""
    values = request.headers.get_all("Upgrade")
    return any(
        token.strip().lower() == "websocket" for value in values for token in value.split(",")
    )


def asset_text(name: str) -> str:
    """A file of the web client, read once (they do not change while the edge runs)."""
    text = _cache.get(name)
    if text is None:
        path = (WEB_DIR / name).resolve()
        if path.parent != WEB_DIR:  # ASSETS names plain files; guard against a bad edit
            raise FileNotFoundError(name)
        text = path.read_text(encoding="utf-8")
        _cache[name] = text
    return text


def process_request(connection: ServerConnection, request: Request) -> Response | None:
    """`serve(process_request=...)`: the page and its files for plain GETs, None (carry on
    with the WebSocket handshake) for upgrades, 404 for anything else."""
    if is_upgrade(request):
        return None
    path = urlsplit(request.path).path  # the query (`?token=`) does not pick the file
    asset = ASSETS.get(path)
    if asset is None:
        return _respond(connection, http.HTTPStatus.NOT_FOUND, "not found\n", None, request)
    name, content_type = asset
    try:
        body = asset_text(name)
    except OSError:
        return _respond(connection, http.HTTPStatus.NOT_FOUND, "not found\n", None, request)
    return _respond(connection, http.HTTPStatus.OK, body, content_type, request)


def _respond(
    connection: ServerConnection,
    status: http.HTTPStatus,
    body: str,
    content_type: str | None,
    request: Request,
) -> Response:
    response = connection.respond(status, body)
    headers = response.headers
    if content_type is not None:
        del headers["Content-Type"]
        headers["Content-Type"] = content_type
    headers["Cache-Control"] = "no-cache"
    hosts = request.headers.get_all("Host")  # exactly one, or the policy names none
    headers["Content-Security-Policy"] = content_security_policy(
        hosts[0] if len(hosts) == 1 else None
    )
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"  # the page's URL may carry ?token=
    headers["Cross-Origin-Opener-Policy"] = "same-origin"
    return response
