"""A role started by `runtime.processes.Child` stops, gracefully, when the process that
started it dies without stopping it (here: SIGKILL; at a terminal, Ctrl-C through `| tee`
did the same), instead of living on as an orphan that holds ports and the ClickHouse
engine's lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.processes import REPO, Child

pytestmark = pytest.mark.integration

ROLE = """
import asyncio
from pathlib import Path
from runtime.service_process import start_process

async def main():
    settings, stop = start_process()
    print("sleeper ready", flush=True)
    await stop.wait()
    Path("stopped").write_text("gracefully")  # its stdout died with the parent's pump

asyncio.run(main())
"""

# The supervisor as a terminal starts it: SIGHUP and Ctrl-C's SIGINT at their defaults (a
# test run under `nohup`, or as a shell's background job, would have them ignored).
PARENT = """
import signal, sys, time
from pathlib import Path
from runtime.processes import Child

signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.default_int_handler)
here = Path(sys.argv[1])
child = Child("sleeper", "sleeper", here / "sleeper.log", dict(__import__("os").environ), cwd=here)
child.wait_ready(60)
print(child.process.pid, flush=True)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def expect_gone(pid: int, within_s: float, failure: str) -> None:
    """Fail (killing it) unless `pid` is gone within `within_s` (a bound, not a timing)."""
    deadline = time.monotonic() + within_s
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not gone(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(failure)


# however the supervisor ends: killed, terminated, its terminal closed (SIGHUP), Ctrl-C
@pytest.mark.parametrize(
    "how", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name
)
def test_a_role_stops_when_its_parent_is_killed(tmp_path: Path, how: signal.Signals):
    (tmp_path / "sleeper.py").write_text(ROLE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TURNSTREAM_METRICS_PORT": "0"}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    assert not gone(child_pid)
    parent.send_signal(how)  # the parent script has no finally, no stop_roles
    parent.wait()
    expect_gone(child_pid, 30, "the role outlived its parent")
    assert (tmp_path / "stopped").read_text() == "gracefully"


def test_stopping_a_role_twice_closes_nothing_of_anyone_else(tmp_path: Path, monkeypatch):
    """The fault suite stops a killed role, then stops it again to restart it: the second
    stop must not close the lifeline's descriptor number again (reused by then)."""
    (tmp_path / "sleeper.py").write_text(ROLE)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    child = Child("sleeper", "sleeper", tmp_path / "sleeper.log", dict(os.environ), cwd=tmp_path)
    child.wait_ready(60)
    lifeline_fd = child._lifeline
    child.stop()
    others = []  # files until one gets the number the lifeline had (the lowest free ones)
    while not others or others[-1].fileno() != lifeline_fd:
        others.append((tmp_path / f"other-{len(others)}.txt").open("w"))
    child.stop()
    for other in others:
        other.write("still open")
        other.close()
    assert (tmp_path / f"other-{len(others) - 1}.txt").read_text() == "still open"


# A role that starts a process of its own and stops without it (as a vLLM worker stopped
# while its engine process was still starting did).
LEAVES_A_CHILD = """
import asyncio, subprocess
from pathlib import Path
from runtime.service_process import start_process

async def main():
    settings, stop = start_process()
    engine = subprocess.Popen(["sleep", "600"])
    Path("engine.pid").write_text(str(engine.pid))
    print("leaver ready", flush=True)
    await stop.wait()

asyncio.run(main())
"""


def test_stopping_a_role_ends_what_it_left_running(tmp_path: Path, monkeypatch):
    (tmp_path / "leaver.py").write_text(LEAVES_A_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    child = Child("leaver", "leaver", tmp_path / "leaver.log", dict(os.environ), cwd=tmp_path)
    child.wait_ready(60)
    engine_pid = int((tmp_path / "engine.pid").read_text())
    child.stop()
    expect_gone(engine_pid, 10, "the role's own process outlived it")
