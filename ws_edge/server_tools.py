"""The deployment's tools (MCP servers', run by the tools worker) as this edge offers them:
the catalog the tools worker writes to Redis, reread on a timer, and the allow-list that
says which tenant may call which (`TURNSTREAM_TOOL_ALLOW`). A client asks for a server's
tools with `{"type": "mcp", "server_label": ...}` in its tools (`ws_edge.tools`).

With no allow-list the edge never reads the catalog: no tenant may call a server tool."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from schemas.channels import RedisNames
from schemas.events import ToolSpec
from schemas.tools import AllowList

log = logging.getLogger("turnstream.edge.tools")
_catalog = msgspec.json.Decoder(list[ToolSpec])


@dataclass(slots=True)
class ServerTools:
    allow: AllowList = field(default_factory=AllowList)
    listed: list[ToolSpec] = field(default_factory=list)

    def of_server(self, tenant: str, server: str) -> list[ToolSpec]:
        """The tools of `server` this tenant may call."""
        return [t for t in self.listed if t.server == server and self.allow.allows(tenant, t.name)]

    def servers(self) -> list[str]:
        return sorted({t.server for t in self.listed})


async def follow_catalog(
    tools: ServerTools, redis: Redis, names: RedisNames, *, every_s: float
) -> None:
    """Keep `tools.listed` to the catalog in Redis (none: no server tools offered)."""
    warned = False
    while True:
        try:
            raw = await redis.get(names.tools_catalog_key())
            tools.listed = _catalog.decode(raw) if raw is not None else []
            warned = False
        except (RedisError, msgspec.DecodeError, msgspec.ValidationError) as err:
            if not warned:
                log.warning("tool catalog unreadable (%s): keeping the last one", err)
                warned = True
        await asyncio.sleep(every_s)
