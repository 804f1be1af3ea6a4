"""The deployment's tool catalog in Redis: what the tools worker listed from its MCP
servers, for the edges to offer (each tenant what the allow-list lets it call). Rewritten
on a timer, so an edge started later, or a Redis that lost it, finds it again."""

from __future__ import annotations

import asyncio
import logging

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.channels import RedisNames
from schemas.events import ToolSpec

log = logging.getLogger("turnstream.tools")


def encode_catalog(tools: list[ToolSpec]) -> bytes:
    return msgspec.json.encode(tools)


async def publish_catalog(
    redis: Redis, names: RedisNames, tools: list[ToolSpec], *, every_s: float
) -> None:
    """Write the catalog now and every `every_s` (it expires after three missed writes)."""
    payload = encode_catalog(tools)
    while True:
        try:
            await redis.set(names.tools_catalog_key(), payload, ex=max(1, int(every_s * 3)))
        except RedisError as err:
            log.warning("tool catalog not written: %s", err)
        await asyncio.sleep(every_s)
