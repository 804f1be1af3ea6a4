"""Wiring of the tools worker: settings → MCP servers, books, Kafka, Redis → running service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from runtime.settings import Settings
from schemas.ids import now_ms
from schemas.topics import TOOLS_REQUESTED, TURNS_SUBMITTED
from workers.runtime.clients import WorkerClients
from workers.runtime.running import RunningService
from workers.tools.books import ToolBooks
from workers.tools.catalog import publish_catalog
from workers.tools.mcp_servers import McpServers
from workers.tools.servers import allow_list, parse_servers
from workers.tools.service import ToolsConfig, ToolsService

CONSUMER_GROUP = "tools"


def mcp_servers(settings: Settings) -> McpServers:
    return McpServers(
        parse_servers(settings.mcp_servers),
        allow=allow_list(settings.tool_allow),
        timeout_s=settings.tool_timeout_s,
        max_result_bytes=settings.tool_max_result_bytes,
    )


@contextlib.asynccontextmanager
async def run_tools_worker(
    settings: Settings, servers: McpServers
) -> AsyncIterator[RunningService[ToolsService]]:
    """`servers`: started (connected, tools listed); the caller closes them."""
    clients = WorkerClients.build(settings, CONSUMER_GROUP, TOOLS_REQUESTED)
    service = ToolsService(
        servers=servers,
        books=ToolBooks(clients.redis, clients.names),
        redis=clients.redis,
        producer=clients.producer,
        names=clients.names,
        config=ToolsConfig(
            worker_id=clients.worker_id,
            submitted_topic=clients.topic(TURNS_SUBMITTED),
            timeout_s=settings.tool_timeout_s,
            max_rounds=settings.tool_max_rounds,
        ),
        clock_ms=now_ms,
    )
    # a turn's calls run one after another; a few turns at once (calls mostly wait on I/O)
    loop = clients.consume_loop(service.handle, service.fail_turn, max_inflight=8)
    background = {
        "cancels": service.listen_for_cancels(),
        "catalog": publish_catalog(
            clients.redis, clients.names, servers.listed(), every_s=settings.tool_catalog_every_s
        ),
    }
    async with clients.run(service, loop, **background) as running:
        yield running
