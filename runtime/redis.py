"""The Redis client every role builds, with one pool policy."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis


def redis_client(url: str, *, max_connections: int = 64, wait_s: float = 5.0) -> Redis:
    """A Redis client whose pool waits for a free connection (up to `wait_s`) instead of
    failing at once under a burst: bounded connections, backpressure rather than errors."""
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=wait_s)
    return Redis(connection_pool=pool)
