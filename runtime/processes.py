"""The roles as child processes: start each (`python -m <module>`), wait until it says it is
ready, stop it (SIGTERM, then SIGKILL), and the list of roles a whole stack runs, in start
order. A child stops by itself when its parent dies without stopping it
(`runtime.lifeline`). The local stack (`infra.stack`), replay's candidate stack, the
benchmarks and the fault suite all start processes through this one place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.engine_cores import shared_engine_env
from runtime.errors import PlumbingError
from runtime.lifeline import LIFELINE_ENV, lifeline
from runtime.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SPINNER = "|/-\\"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now (for extra edges in tests, benches)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StackError(PlumbingError, RuntimeError):
    pass


class Child:
    """A service process whose output goes to a log file; ready when it prints `ready_text`."""

    def __init__(
        self,
        name: str,
        module: str,
        log_path: Path,
        env: dict[str, str],
        *,
        nice: int = 0,
        cwd: Path = REPO,
        python_args: tuple[str, ...] = (),
    ) -> None:
        """`python_args`: what follows the interpreter instead of `-m module` (a benchmark
        that starts the module through a wrapper of its own)."""
        self.name = name
        self.log_path = log_path
        self.ready_line: str | None = None
        self._log = log_path.open("a")
        niced = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
        # the child's read end; we hold the write end until it has stopped (or we die)
        child_end, self._lifeline = lifeline()
        try:
            self.process = subprocess.Popen(
                [*niced, sys.executable, *(python_args or ("-m", module))],
                cwd=cwd,  # another tree's roles (a benchmark's baseline) win over the installed
                env={**env, LIFELINE_ENV: str(child_end)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # Ctrl-C reaches us, and we stop children in order
                pass_fds=(child_end,),
            )
        finally:
            os.close(child_end)
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if self._log.closed:  # stopped, but something it started still holds the pipe
                break
            self._log.write(line)
            self._log.flush()
            if " ready" in line and not self._ready.is_set():
                self.ready_line = line.strip()
                self._ready.set()

    def wait_ready(self, timeout_s: float) -> None:
        started = time.monotonic()
        i = 0
        while not self._ready.wait(0.25):
            elapsed = time.monotonic() - started
            if self.process.poll() is not None:
                raise StackError(
                    f"{self.name} exited (code {self.process.returncode}); see {self.log_path}"
                )
            if elapsed > timeout_s:
                raise StackError(
                    f"{self.name} not ready after {timeout_s:.0f} s; see {self.log_path}"
                )
            print(
                f"\r  {SPINNER[i % 4]} starting {self.name}... {elapsed:4.0f} s",
                end="",
                file=sys.stderr,
                flush=True,
            )
            i += 1
        print(
            f"\r  ✓ {self.name} ready ({time.monotonic() - started:.0f} s)          ",
            file=sys.stderr,
            flush=True,
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._end_session()
        self._log.close()
        if self._lifeline >= 0:  # once: a second stop must not close a reused descriptor
            os.close(self._lifeline)
            self._lifeline = -1

    def _end_session(self) -> None:
        """Kill what the role started and left behind in its session (its process group):
        a vLLM worker stopped while its engine was still starting left `VLLM::EngineCore`
        running, holding its memory, and the next worker's engine hung beside it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class ServiceRole:
    """A service process of the stack, in start order (consumers before the edge)."""

    name: str
    module: str
    log: str
    ready_within_s: float
    note: str = ""
    # CPU priority (`nice`): the analytics roles yield to the serving path when they share
    # a machine (the local stack: 2 cores). Measured: at 64 streams the traces job and the
    # sink took 38% of the roles' CPU (7.4 of 19.4 ms per turn), and the serving path's
    # queues grew behind them. In production they run on their own nodes.
    nice: int = 0


ROLES = (
    ServiceRole("inference worker", "workers.inference", "inference", 600, "vLLM: 20-45 s on CPU"),
    ServiceRole("preprocess worker", "workers.preprocess", "preprocess", 120, "VAD, ASR, images"),
    ServiceRole("safety worker", "workers.safety", "safety", 120, "checks answer windows"),
    ServiceRole("tts worker", "workers.tts", "tts", 120, "speaks answers (piper, espeak-ng)"),
    ServiceRole("assembly job", "stream_jobs.assembly", "assembly", 120, "history, prompts"),
    ServiceRole("traces job", "stream_jobs.traces", "traces", 120, "joins turn events", nice=10),
    ServiceRole(
        "clickhouse sink", "workers.sink", "sink", 120, "turns, traces → ClickHouse", nice=10
    ),
    ServiceRole("audit worker", "workers.audit", "audit", 120, "audits every answer", nice=10),
    ServiceRole("tools worker", "workers.tools", "tools", 120, "runs MCP servers' tools"),
    ServiceRole("edge", "ws_edge", "edge", 60),
)


def start_roles(
    env: dict[str, str],
    logs: Path,
    *,
    log_prefix: str = "",
    first_step: int = 0,
    steps: int = 0,
    only: tuple[str, ...] = (),
    cwd: Path = REPO,
) -> list[Child]:
    """Start every role (or those whose `log` name is in `only`) and wait until each is
    ready; on failure stop the ones started. `cwd`: the source tree the roles run from."""
    children: list[Child] = []
    roles = [r for r in ROLES if not only or r.log in only]
    try:
        for i, role in enumerate(roles):
            if steps:
                note = f" ({role.note})" if role.note else ""
                print(f"[{first_step + i}/{steps}] {role.name}{note}", file=sys.stderr)
            log = logs / f"{log_prefix}{role.log}.log"
            role_env = env
            if role.module == "workers.inference":  # its engine's cores: runtime.engine_cores
                role_env = {**env, **shared_engine_env(env)}
            child = Child(role.name, role.module, log, role_env, nice=role.nice, cwd=cwd)
            children.append(child)
            child.wait_ready(timeout_s=role.ready_within_s)
    except BaseException:
        stop_roles(children)
        raise
    return children


def start_extra_edges(
    env: dict[str, str], logs: Path, settings: Settings, count: int
) -> list[Child]:
    """Edge nodes 2..count on the ports after the first one's, both doors (each its own
    id); an HTTP door on any port (0) or none (-1) stays so."""
    edges: list[Child] = []
    try:
        for i in range(1, count):
            edge_env = {
                **env,
                "TURNSTREAM_EDGE_PORT": str(settings.edge_port + i),
                "TURNSTREAM_EDGE_HTTP_PORT": str(
                    settings.edge_http_port + i
                    if settings.edge_http_port > 0
                    else settings.edge_http_port
                ),
                "TURNSTREAM_EDGE_ID": f"{settings.edge_id}-{i + 1}" if settings.edge_id else "",
            }
            child = Child(f"edge {i + 1}", "ws_edge", logs / f"edge-{i + 1}.log", edge_env)
            edges.append(child)
            child.wait_ready(timeout_s=60)
    except BaseException:
        stop_roles(edges)
        raise
    return edges


def stop_roles(children: list[Child]) -> None:
    """The edge first, so no new turn arrives while the consumers drain."""
    for child in reversed(children):
        child.stop()
