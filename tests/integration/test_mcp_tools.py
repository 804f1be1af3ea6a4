"""Server-side tools against real MCP servers written with the official SDK: a calculator
over stdio and a key-value store with side effects over streamable HTTP (its writes land in
a books file). Listing, per-tenant allow-lists, calls, errors the model should read,
timeouts, size limits, a server that is down, and the idempotency key a write carries."""

from __future__ import annotations

import json

import pytest

from harness.metrics import free_port
from schemas.tools import AllowList
from workers.tools.errors import ToolNotAllowed, ToolResultTooLarge, ToolTimeout, UnknownTool
from workers.tools.mcp_servers import McpServers
from workers.tools.servers import ServerSpec

pytestmark = pytest.mark.integration


async def started(servers: McpServers) -> McpServers:
    await servers.start()
    return servers


async def test_tools_of_both_transports_under_a_per_tenant_allow_list(kv_server):
    url, books = kv_server
    servers = await started(
        McpServers(
            [
                ServerSpec("calc", ("python", "-m", "harness.mcp_servers.calculator")),
                ServerSpec("kv", url=url),
                ServerSpec("down", url=f"http://127.0.0.1:{free_port()}/mcp"),
            ],
            allow=AllowList.parse("acme=calc__*,kv__*;globex=calc__add"),
            timeout_s=2.0,
            max_result_bytes=1000,
            connect_timeout_s=5.0,
        )
    )
    try:
        acme = {t.name: t for t in servers.catalog("acme")}
        assert {"calc__add", "calc__divide", "kv__put", "kv__get"} <= set(acme)
        assert json.loads(acme["calc__add"].parameters)["required"] == ["a", "b"]
        assert [t.name for t in servers.catalog("globex")] == ["calc__add"]
        assert servers.catalog("initech") == []
        assert not any(name.startswith("down__") for name in acme)  # unreachable: left out

        added = await servers.call("acme", "calc__add", {"a": 2, "b": 3}, idempotency_key="k0")
        assert (added.text, added.is_error) == ("5.0", False)
        failed = await servers.call("acme", "calc__divide", {"a": 1, "b": 0}, idempotency_key="k1")
        assert failed.is_error and "division by zero" in failed.text  # the model reads why
        with pytest.raises(ToolNotAllowed):
            await servers.call("globex", "calc__divide", {"a": 1, "b": 2}, idempotency_key="k2")
        with pytest.raises(UnknownTool):
            await servers.call("acme", "calc__sqrt", {"a": 4}, idempotency_key="k3")
        with pytest.raises(ToolTimeout):
            await servers.call("acme", "calc__slow", {"seconds": 5}, idempotency_key="k4")
        with pytest.raises(ToolResultTooLarge):
            await servers.call("acme", "calc__huge", {"characters": 5000}, idempotency_key="k5")
        again = await servers.call("acme", "calc__multiply", {"a": 4, "b": 5}, idempotency_key="k6")
        assert again.text == "20.0"  # the server still serves after a timeout

        stored = await servers.call(
            "acme", "kv__put", {"key": "city", "value": "Oslo"}, idempotency_key="turn-1:0:call_0"
        )
        assert not stored.is_error
        read = await servers.call("acme", "kv__get", {"key": "city"}, idempotency_key="k7")
        assert read.text == "Oslo"
        lines = [json.loads(line) for line in books.read_text().splitlines()]
        assert lines == [{"key": "city", "value": "Oslo", "idempotency": "turn-1:0:call_0"}]
    finally:
        await servers.close()
