"""Reading a Prometheus endpoint in tests: a free port to serve it on, a scrape, a series'
value."""

from __future__ import annotations

import re
import socket
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> str:
    """The endpoint's text (blocking: call it through asyncio.to_thread in async tests)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def value(text: str, series: str) -> float:
    """The summed value of every sample of `series` (a name, or a name{labels} prefix)."""
    pattern = re.compile(rf"^{re.escape(series)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))
