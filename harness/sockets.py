"""Client sockets that misbehave the way slow readers do."""

from __future__ import annotations

import socket


def tiny_socket(port: int) -> socket.socket:
    """A connected socket with a small receive window, so frames its reader leaves unread
    back up at the edge after a few kilobytes instead of filling megabytes of kernel
    buffers first."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock
