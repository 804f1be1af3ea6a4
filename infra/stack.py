"""`python -m infra.stack`: the whole local stack, then the terminal chat.

Starts the services (Kafka, Redis, topics, ClickHouse migrations), converts the bundled
model if needed, starts the roles (inference worker on vLLM, preprocessing worker, assembly
job, traces job, ClickHouse sink, edge) as child processes, waits until each is ready (showing
progress), then opens the chat. Ctrl-C at the prompt, or leaving the chat, stops everything
cleanly (services too, unless --keep-services). `--serve` runs the stack without the chat
until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
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

from runtime.settings import Settings
from runtime.smollm2 import default_model_dir, is_converted
from ws_edge.auth import mint_token
from ws_edge.chat import chat

REPO = Path(__file__).resolve().parent.parent
SPINNER = "|/-\\"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now (for extra edges in tests, benches)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StackError(RuntimeError):
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
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.ready_line: str | None = None
        self._log = log_path.open("a")
        niced = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
        self.process = subprocess.Popen(
            [*niced, sys.executable, "-m", module],
            cwd=cwd,  # another tree's roles (a benchmark's baseline) win over the installed
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C reaches us, and we stop children in order
        )
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
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
        self._log.close()


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
            child = Child(role.name, role.module, log, env, nice=role.nice, cwd=cwd)
            children.append(child)
            child.wait_ready(timeout_s=role.ready_within_s)
    except BaseException:
        stop_roles(children)
        raise
    return children


def start_extra_edges(
    env: dict[str, str], logs: Path, settings: Settings, count: int
) -> list[Child]:
    """Edge nodes 2..count on the ports after the first one's (each its own id)."""
    edges: list[Child] = []
    try:
        for i in range(1, count):
            edge_env = {
                **env,
                "TURNSTREAM_EDGE_PORT": str(settings.edge_port + i),
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


def run_script(*args: str) -> None:
    subprocess.run([str(REPO / "infra" / args[0]), *args[1:]], check=True, cwd=REPO)


def prepare(settings: Settings, engine: str) -> None:
    """Steps 1-2: services up, bundled model converted (both idempotent)."""
    print("[1/6] local services", file=sys.stderr)
    run_script("services.sh", "start")
    if engine in ("vllm", "transformers") and not settings.model_path:
        print("[2/6] bundled model", file=sys.stderr)
        if not is_converted(default_model_dir(settings)):
            subprocess.run([sys.executable, "-m", "runtime.smollm2"], check=True, cwd=REPO)
        else:
            print(f"  ✓ {default_model_dir(settings)}", file=sys.stderr)


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--engine", default=settings.engine, choices=["vllm", "transformers", "fake"]
    )
    parser.add_argument("--serve", action="store_true", help="no chat; serve until Ctrl-C")
    parser.add_argument("--keep-services", action="store_true")
    parser.add_argument(
        "--edges",
        type=int,
        default=1,
        help="edge nodes, on consecutive ports from TURNSTREAM_EDGE_PORT (a client may "
        "resume its answers on any of them)",
    )
    args = parser.parse_args()

    logs = settings.state_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TURNSTREAM_ENGINE": args.engine, "PYTHONUNBUFFERED": "1"}
    prepare(settings, args.engine)
    children: list[Child] = []
    signal.signal(signal.SIGTERM, _raise_interrupt)
    exit_code = 0
    try:
        children = start_roles(env, logs, first_step=3, steps=2 + len(ROLES))
        children += start_extra_edges(env, logs, settings, args.edges)
        print(f"logs: {logs}", file=sys.stderr)
        url = f"ws://{settings.edge_host}:{settings.edge_port}/"
        if args.serve:
            web_token = mint_token(settings.auth_secret, os.environ.get("USER", "you"), "local")
            for i in range(max(args.edges, 1)):
                port = settings.edge_port + i
                print(f"edge {i + 1}: ws://{settings.edge_host}:{port}/", file=sys.stderr)
            print(
                f"web client: http://{settings.edge_host}:{settings.edge_port}/?token={web_token}",
                file=sys.stderr,
            )
            print(f"serving on {url} (Ctrl-C stops)", file=sys.stderr)
            while True:
                time.sleep(3600)
        else:
            token = mint_token(settings.auth_secret, os.environ.get("USER", "you"), "local")
            asyncio.run(chat(url, token, settings.state_path / "speech"))
    except KeyboardInterrupt:
        pass
    except StackError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        exit_code = 1
    finally:
        print("\nstopping...", file=sys.stderr)
        stop_roles(children)
        if not args.keep_services:
            run_script("services.sh", "stop")
    sys.exit(exit_code)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
