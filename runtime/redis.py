"""The Redis client every role builds, with one pool policy."""

from __future__ import annotations

import socket

from redis.asyncio import BlockingConnectionPool, Redis

CONNECT_TIMEOUT_S = 5.0
# a peer gone without a word (a partition, a dead host) is found by TCP keepalive:
# idle 5 s, then 3 probes 2 s apart
KEEPALIVE = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}


def redis_client(url: str, *, max_connections: int = 64, wait_s: float = 5.0) -> Redis:
    """A Redis client whose pool waits for a free connection (up to `wait_s`) instead of
    failing at once under a burst: bounded connections, backpressure rather than errors.

    No socket timeout on commands: redis-py 8 defaults it to 5 s and then bounds each send
    with `asyncio.wait_for`, which on Python 3.11 returns the send's result when a cancel
    arrives as the send completes, so the task's cancellation is lost (a plain SET loop
    lost 9 in 10 cancels; the KV mirror's stop hung in CI). Callers bound their waits
    with `asyncio.timeout`, which keeps the cancel; a silent peer is found by keepalive."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_s,
        socket_timeout=None,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_keepalive=True,
        socket_keepalive_options=KEEPALIVE,
    )
    return Redis(connection_pool=pool)
