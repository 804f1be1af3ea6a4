"""The edge's listening sockets, when the kernel's defaults will not do.

A connection whose reader stops holds what the edge wrote in the kernel's send buffer,
which Linux grows by itself up to `net.ipv4.tcp_wmem`'s maximum (4 MB here) before a write
blocks and the edge's own bounded outbox takes over. At 10k connections that is memory
nobody bounded; `TURNSTREAM_EDGE_SEND_BUFFER_BYTES` caps it per connection (set on the
listening socket, which accepted sockets inherit), so a stalled reader meets the outbox's
bound after kilobytes instead of megabytes.
"""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, send_buffer_bytes: int) -> socket.socket:
    """A bound, listening TCP socket whose accepted connections have this send buffer."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
