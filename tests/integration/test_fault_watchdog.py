"""A fault run killed before it cleans up leaves nothing behind: its watchdog stops the
daemons named by the run home's pidfiles (Kafka nodes, Redis) and removes the home."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.faults.watchdog import _running
from runtime.processes import REPO

pytestmark = pytest.mark.integration

RUNNER = """
import subprocess, sys, time
from pathlib import Path
from bench.faults.watchdog import start_watchdog

home = Path(sys.argv[1])
(home / "run").mkdir(parents=True)
# a daemon as the scripts start them: detached, known only by its pidfile
daemon = subprocess.Popen(["sleep", "600"], start_new_session=True)
(home / "run" / "kafka-1.pid").write_text(str(daemon.pid))
start_watchdog(home, keep_home=False)
print(daemon.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_runner_leaves_no_daemon_and_no_home(tmp_path: Path):
    home = tmp_path / "run-home"
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(home)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    daemon = int(runner.stdout.readline())
    assert _running(daemon)
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 30
    while (_running(daemon) or home.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(daemon), "the run's daemon outlived its runner"
    assert not home.exists(), "the run's home was left behind"
