"""The key-value MCP server as a process of its own, for tests and the fault suite."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from harness.metrics import free_port

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def kv_store_server(folder: Path, *, linger_s: float = 0.0) -> Iterator[tuple[str, Path]]:
    """Start it on a free port, its books and log in `folder`, and wait until it listens
    (its first client does not race its start): (its URL, its books of writes).
    `linger_s`: it answers every write that long after making it."""
    port, books = free_port(), folder / "kv-books.jsonl"
    books.touch()
    with (folder / "kv-server.log").open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.mcp_servers.kv_store",
                "--port",
                str(port),
                "--books",
                str(books),
                "--linger-s",
                str(linger_s),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the kv MCP server did not start; see {log.name}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", books
    finally:
        process.terminate()
        process.wait(10)
