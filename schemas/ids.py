"""Instance ids and the epoch-millisecond clock that event timestamps use, shared by all roles."""

from __future__ import annotations

import os
import socket
import time
import uuid


def make_instance_id(role: str, configured: str = "") -> str:
    """A configured id, or `<role>-<host>-<pid>-<random>` (unique across restarts)."""
    if configured:
        return configured
    return f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def now_ms() -> float:
    """Wall clock in epoch milliseconds (comparable across processes on one host)."""
    return time.time() * 1000.0
