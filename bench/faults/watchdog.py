"""The fault suite's watchdog: a killed runner leaves nothing behind.

The run's Kafka nodes and Redis are daemons (the project's scripts start them so), and
the runner stops them when it ends. A runner that dies without ending (kill -9, a CI job's
timeout, a closed terminal) would leave them running, with their ports, memory and data.
So `isolated_services` starts this process beside them, in a session of its own, holding
the read end of a lifeline (`runtime.lifeline`) whose write end only the runner holds.
End-of-file (the runner closed it, or died) means the run is over: stop every process
named by a pidfile of the run's home, then remove the home (unless it is kept). After a
clean end the runner has done both already, and the watchdog finds nothing to do.

    python -m bench.faults.watchdog HOME [--keep-home]      (with TURNSTREAM_LIFELINE_FD)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from runtime.lifeline import LIFELINE_ENV, lifeline


def stop_pidfiles(home: Path, grace_s: float = 10.0) -> list[int]:
    """SIGTERM every process named in `home/run/*.pid`, SIGKILL those alive after
    `grace_s`; the pids signalled."""
    pids = []
    for pidfile in sorted((home / "run").glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + grace_s
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return pids


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def start_watchdog(home: Path, *, keep_home: bool) -> int:
    """Start the watchdog of `home`; the lifeline's write end, for the caller to close
    once it has cleaned up itself (or to lose when it dies)."""
    child_end, parent_end = lifeline()
    try:
        subprocess.Popen(
            [sys.executable, "-m", "bench.faults.watchdog", str(home)]
            + (["--keep-home"] if keep_home else []),
            env={**os.environ, LIFELINE_ENV: str(child_end)},
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the runner's terminal is the runner's
            pass_fds=(child_end,),
        )
    finally:
        os.close(child_end)
    return parent_end


def main() -> None:
    home = Path(sys.argv[1])
    keep_home = "--keep-home" in sys.argv[2:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = int(os.environ[LIFELINE_ENV])
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass  # nothing is ever written; end-of-file is the message
    stop_pidfiles(home)
    if not keep_home:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
