"""The roles of a fault run as child processes (`runtime.processes.Child`), each one killable and
restartable on its own: two inference workers (a killed one's turns fail over to the other),
the preprocessing worker, the assembly and traces jobs, the ClickHouse sink and two edges (a
killed edge's clients resume on the other).

The safety and TTS workers are left out (the load asks for no speech; the output check is
off): on a 2-core machine every process costs the roles under test CPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.engine_cores import BIND, engine_cores
from runtime.processes import ROLES, Child, StackError, stop_roles

BY_LOG = {role.log: role for role in ROLES}


@dataclass(frozen=True, slots=True)
class Role:
    key: str  # how scenarios name it: "inference-1", "edge-2", "assembly", ...
    log: str  # its infra.stack role (module, readiness, nice)
    env: tuple[tuple[str, str], ...] = ()

    @property
    def module(self) -> str:
        return BY_LOG[self.log].module


def roles(
    workers: int,
    edges: int,
    edge_port: int,
    edge_http_port: int,
    cores: list[int] | None = None,
    *,
    tools: bool = False,
) -> list[Role]:
    """Consumers first, edges last (as `infra.stack` starts them). With `cores` (a real
    engine), each inference worker's engine is bound to its own of them; `tools`: a tools
    worker too (the tool scenario)."""
    found = [
        Role(
            f"inference-{i}",
            "inference",
            (("TURNSTREAM_WORKER_ID", f"faults-worker-{i}"),)
            + (((BIND, engine_cores(i, workers, cores)),) if cores else ()),
        )
        for i in range(1, workers + 1)
    ]
    found += [Role(name, name) for name in ("preprocess", "assembly", "traces", "sink")]
    found += [Role("tools", "tools")] if tools else []
    found += [
        Role(
            f"edge-{i}",
            "edge",
            (
                ("TURNSTREAM_EDGE_PORT", str(edge_port + i - 1)),
                ("TURNSTREAM_EDGE_HTTP_PORT", str(edge_http_port + i - 1)),
                ("TURNSTREAM_EDGE_ID", f"faults-edge-{i}"),
            ),
        )
        for i in range(1, edges + 1)
    ]
    return found


class FaultStack:
    def __init__(
        self,
        env: dict[str, str],
        logs: Path,
        roles: list[Role],
        progress: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.env = env
        self.progress = progress
        self.logs = logs
        self.roles = {role.key: role for role in roles}
        self.children: dict[str, Child] = {}
        self.restarts: dict[str, int] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def _spawn(self, key: str) -> Child:
        role = self.roles[key]
        spec = BY_LOG[role.log]
        env = {**self.env, **dict(role.env)}
        child = Child(key, role.module, self.logs / f"{key}.log", env, nice=spec.nice)
        self.children[key] = child
        return child

    def start(self) -> None:
        """Every role at once (their imports overlap), then wait until each is ready."""
        try:
            for key in self.roles:
                self._spawn(key)
            for key in self.children:
                self._wait_ready(key)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, key: str) -> None:
        """`Child.wait_ready` without its terminal spinner (this runs beside the load's
        progress lines)."""
        child = self.children[key]
        started = time.monotonic()
        deadline = started + BY_LOG[self.roles[key].log].ready_within_s
        while child.ready_line is None:
            if child.process.poll() is not None:
                raise StackError(f"{key} exited ({child.process.returncode}); see {child.log_path}")
            if time.monotonic() > deadline:
                raise StackError(f"{key} not ready in time; see {child.log_path}")
            time.sleep(0.1)
        self.progress(f"  ✓ {key} ready ({time.monotonic() - started:.0f} s)")

    def stop(self) -> None:
        stop_roles(list(self.children.values()))

    def pid(self, key: str) -> int:
        return self.children[key].process.pid

    def kill(self, key: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (kill -9 by default) to the role's process group and wait until the
        role is gone. The group: the role and what it started (vLLM's engine processes),
        as a container's death takes them together. The role's process alone is not
        enough: vLLM's engine does not watch its parent, and an orphaned engine holds its
        memory (on a GPU, the memory the restarted worker needs)."""
        child = self.children[key]
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, sig)  # a session of its own: pgid == pid
            child.process.wait(timeout=60)
        child.stop()  # closes its log

    def restart(self, key: str) -> float:
        """Start the role again (after a kill); seconds until it was ready."""
        self.kill(key)
        started = time.monotonic()
        self._spawn(key)
        self._wait_ready(key)
        self.restarts[key] = self.restarts.get(key, 0) + 1
        return time.monotonic() - started

    def exited(self) -> dict[str, int]:
        """Roles that died on their own, with their exit codes."""
        return {
            key: child.process.returncode
            for key, child in self.children.items()
            if child.process.poll() is not None
        }

    def revive(self) -> list[str]:
        """Restart every role that died on its own (so the next fault starts whole)."""
        dead = list(self.exited())
        for key in dead:
            self.restart(key)
        return dead

    def edge_urls(self, host: str = "127.0.0.1") -> list[str]:
        return [
            f"ws://{host}:{dict(role.env)['TURNSTREAM_EDGE_PORT']}/"
            for role in self.roles.values()
            if role.log == "edge"
        ]
