"""The parent's side: its children as peers, the handshake probe, the edge as a child process and
what its log says."""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from bench.connections.common import progress
from bench.connections.roles import _child_main
from bench.connections.stats import Window
from bench.stats import summary


class BenchError(RuntimeError):
    pass


class Peer:
    """A child process and the pipe to it."""

    def __init__(self, name: str, role: str, config: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child_end = ctx.Pipe()
        self.process = ctx.Process(
            target=_child_main, args=(role, child_end, config), name=name, daemon=True
        )
        self.process.start()
        child_end.close()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def call(self, command: str, *args: Any, timeout_s: float = 120) -> Any:
        return call_all([self], command, [args], timeout_s=timeout_s)[0]

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(Exception):
                self.call("exit", timeout_s=15)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def call_all(
    peers: Sequence[Peer],
    command: str,
    args: Sequence[tuple[Any, ...]],
    *,
    timeout_s: float = 120,
    label: str = "",
    total: int = 0,
) -> list[Any]:
    """Send each peer its command, then wait for every answer, showing their progress."""
    for peer, peer_args in zip(peers, args, strict=True):
        peer.conn.send((command, tuple(peer_args)))
    results: dict[int, Any] = {}
    counts = [0] * len(peers)
    deadline = time.monotonic() + timeout_s
    last_shown = time.monotonic()
    started = time.monotonic()
    by_conn = {peer.conn: i for i, peer in enumerate(peers)}
    while len(results) < len(peers):
        if time.monotonic() > deadline:
            raise BenchError(f"{command}: no answer within {timeout_s:.0f} s")
        for conn in wait([p.conn for i, p in enumerate(peers) if i not in results], timeout=0.5):
            i = by_conn[conn]  # type: ignore[index]
            try:
                kind, payload = peers[i].conn.recv()
            except EOFError:
                raise BenchError(f"{peers[i].name} exited during {command}") from None
            if kind == "progress":
                counts[i] = payload
            elif kind == "error":
                raise BenchError(f"{peers[i].name} failed in {command}:\n{payload}")
            else:
                results[i] = payload
        if label and time.monotonic() - last_shown >= 2:
            last_shown = time.monotonic()
            done = sum(counts)
            rate = done / (time.monotonic() - started)
            progress(f"{label}: {done}/{total} ({rate:.0f}/s)")
    return [results[i] for i in range(len(peers))]


def sleep_with_progress(seconds: float, label: str) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 5))
        if end - time.monotonic() > 0.5:
            progress(f"{label}: {end - time.monotonic():.0f} s left")


class HandshakeProbe:
    """From this (idle) process, a new WebSocket handshake with the edge every `every_s`:
    the time from connect() to the `101 Switching Protocols`, seen by a client that is not
    itself busy (tells the edge's slowness from the load clients')."""

    def __init__(self, port: int, token: str, every_s: float = 0.25) -> None:
        import threading

        self.port = port
        self.token = token
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []  # (wall ms at start, ms; inf: failed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import base64
        import socket

        while not self._stop.wait(self.every_s):
            key = base64.b64encode(os.urandom(16)).decode()
            request = (
                f"GET /?token={self.token} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            at_ms, started = time.time() * 1000, time.perf_counter()
            took = math.inf
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=15) as sock:
                    sock.sendall(request.encode())
                    answer = b""
                    while b"\r\n\r\n" not in answer:
                        chunk = sock.recv(4096)
                        if not chunk:
                            break
                        answer += chunk
                    if answer.startswith(b"HTTP/1.1 101"):
                        took = (time.perf_counter() - started) * 1000
            except OSError:
                pass
            self.samples.append((at_ms, took))

    def between(self, window: Window) -> dict[str, float]:
        took = [ms for at, ms in self.samples if at in window]
        done = [ms for ms in took if ms != math.inf]
        return summary(done) | {"failed": len(took) - len(done)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


def redis_pid(url: str) -> int | None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def clean_namespace(settings: Any) -> None:
    """Drop the run's Kafka topics and Redis keys (each run has its own namespace)."""
    from bench.namespace import drop_namespace

    asyncio.run(drop_namespace(settings))


def edge_log_facts(path: Path) -> dict[str, int]:
    """Trouble the edge logged: lost relay subscriptions, slow clients closed, tracebacks."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return {
        "relay_resubscribes": text.count("relay subscription lost"),
        "slow_clients_closed": text.count("closing slow client"),
        "tracebacks": text.count("Traceback"),
        "warnings": text.count(" WARNING "),
    }


# The edge's process: `python -m ws_edge` as it is, started through `runpy` so that the
# benchmark can time the edge's full garbage collections (a gc callback; nothing else
# changes) and, to diagnose, run it without the cyclic collector (--edge-gc off).
EDGE_BOOT = """
import gc, os, runpy, sys, time
path = os.environ.get("BENCH_GC_LOG")
if path:
    out = open(path, "a", buffering=1)
    started = [0.0]
    def timed(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            pause_ms = (time.perf_counter() - started[0]) * 1000
            out.write(f"{time.time() * 1000:.1f} {pause_ms:.2f}\\n")
    gc.callbacks.append(timed)
if os.environ.get("BENCH_EDGE_GC") == "off":
    gc.disable()
sys.argv = ["ws_edge"]
runpy.run_module("ws_edge", run_name="__main__", alter_sys=True)
"""


def gc_pauses(path: Path, window: Window | None = None) -> dict[str, float]:
    """The edge's full collections (from its gc log): count, total and longest pause (ms),
    in `window` or over the whole run."""
    pauses = []
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        at_ms, _, pause_ms = line.partition(" ")
        if window is None or float(at_ms) in window:
            pauses.append(float(pause_ms))
    return {"count": len(pauses), "total_ms": sum(pauses), "max_ms": max(pauses, default=0.0)}


def start_edge(env: dict[str, str], log_path: Path) -> Any:
    """The edge in its own process (an `runtime.processes.Child`: output to `log_path`, ready when
    it prints its ready line)."""
    from runtime.processes import Child

    # Child's own start (lifeline, session, log), with `-c EDGE_BOOT` for `-m ws_edge`
    return Child("edge", "ws_edge", log_path, env, python_args=("-c", EDGE_BOOT))
