"""What the operating system tells: descriptors, CPU seconds, RSS, how busy the machine is, listen
overflows."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time
from pathlib import Path


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its threads) so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


def listen_overflows() -> int:
    """Connections the kernel dropped because a listening socket's accept queue was full
    (TcpExt ListenOverflows, machine-wide): the client retries its SYN after 1, 3, 7 s."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", 0))
    return 0


def find_pid(needle: str) -> int | None:
    """The first process whose command line contains `needle` (Kafka's JVM)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return int(entry.name)
    return None


class CpuMeter:
    """CPU% (100 = one core) of named processes, and of the rest of the machine, between
    `start()` and `stop()`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self._start: tuple[float, dict[str, float], tuple[float, float]] | None = None

    def start(self) -> None:
        self._start = (time.monotonic(), self._sample(), machine_busy())

    def _sample(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        assert self._start is not None
        started, before, (busy0, total0) = self._start
        wall = time.monotonic() - started
        after = self._sample()
        busy1, total1 = machine_busy()
        usage = {name: 100 * (after[name] - before[name]) / wall for name in after}
        cores = os.cpu_count() or 1
        machine = 100 * cores * (busy1 - busy0) / max(total1 - total0, 1e-9)
        usage["machine"] = machine
        usage["others"] = machine - sum(v for k, v in usage.items() if k != "machine")
        return usage
