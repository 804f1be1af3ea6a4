"""Running a script against an embedded ClickHouse engine in its own process (chdb allows
one data directory per process, and the test process may already hold one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra.stack import REPO


def run_in_engine(script: str, home: Path, *args: str) -> str:
    """Run `script` (with `args`) against the engine under TURNSTREAM_HOME=`home`, in a
    process of its own; it must exit 0. Returns what it printed."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"TURNSTREAM_HOME": str(home), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def check_in_fresh_engine(script: str, home: Path) -> None:
    """Run `script` with TURNSTREAM_HOME=`home`; it must exit 0 and print `ok` last."""
    assert run_in_engine(script, home).strip().endswith("ok")
