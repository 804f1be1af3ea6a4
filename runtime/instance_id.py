"""A process's instance id: the name it signs its events, consumer-group members and board
entries with, unique across restarts on one host."""

from __future__ import annotations

import os
import socket
import uuid


def make_instance_id(role: str, configured: str = "") -> str:
    """A configured id, or `<role>-<host>-<pid>-<random>` (unique across restarts)."""
    if configured:
        return configured
    return f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
