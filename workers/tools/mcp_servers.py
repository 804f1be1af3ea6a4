"""The MCP servers a deployment lists, connected through the official SDK: their tools as
the model is offered them, and calls run under a timeout and a size limit.

Each server is held open by a task of its own (the SDK's client is entered and left in
one task); calls go to it from any task. A server that cannot be reached at start is logged
and left out (the others serve); its tools are simply not offered. Every call carries its
idempotency key in the request's `_meta` (`io.turnstream/idempotency-key`), so a server
that deduplicates writes can; the tools worker keeps its own books as well.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from schemas.events import ToolSpec
from schemas.tools import AllowList, qualified
from workers.tools.errors import (
    ToolNotAllowed,
    ToolResultTooLarge,
    ToolServerUnavailable,
    ToolTimeout,
    UnknownTool,
)
from workers.tools.servers import ServerSpec

log = logging.getLogger("turnstream.tools")
IDEMPOTENCY_META = "io.turnstream/idempotency-key"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a call returned, as the model will read it (`is_error`: the tool said it
    failed; the model sees why and may try otherwise)."""

    text: str
    is_error: bool
    duration_ms: float


@dataclass(frozen=True, slots=True)
class _Listed:
    server: str
    tool: str
    spec: ToolSpec


class McpServers:
    def __init__(
        self,
        servers: list[ServerSpec],
        *,
        allow: AllowList,
        timeout_s: float = 10.0,
        max_result_bytes: int = 64 * 1024,
        connect_timeout_s: float = 20.0,
    ) -> None:
        self._servers = servers
        self._allow = allow
        self._timeout_s = timeout_s
        self._max_result_bytes = max_result_bytes
        self._connect_timeout_s = connect_timeout_s
        self._clients: dict[str, Any] = {}
        self._tools: dict[str, _Listed] = {}
        self._holders: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    async def start(self) -> None:
        """Connect to every server and list its tools (those that fail are left out)."""
        for spec in self._servers:
            ready = asyncio.Event()
            self._holders.append(asyncio.create_task(self._hold(spec, ready)))
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    await ready.wait()
            except TimeoutError:
                log.warning(
                    "MCP server %s did not answer in %.0f s", spec.name, self._connect_timeout_s
                )
        for name, client in self._clients.items():
            try:
                async with asyncio.timeout(self._timeout_s):
                    listed = await client.list_tools()
            except Exception as err:  # a broken server is left out, not fatal
                log.warning("MCP server %s: listing its tools failed: %r", name, err)
                continue
            for tool in listed.tools:
                full = qualified(name, tool.name)
                hints = tool.annotations
                offered = ToolSpec(
                    full,
                    tool.description or "",
                    json.dumps(tool.input_schema),
                    server=name,
                    read_only=bool(hints is not None and hints.read_only_hint),
                )
                self._tools[full] = _Listed(name, tool.name, offered)
        log.info("MCP tools: %s", ", ".join(sorted(self._tools)) or "none")

    def catalog(self, tenant: str) -> list[ToolSpec]:
        """The tools this tenant may call, as the model is offered them."""
        return [
            t.spec for name, t in sorted(self._tools.items()) if self._allow.allows(tenant, name)
        ]

    def offers(self, name: str) -> bool:
        return name in self._tools

    def listed(self) -> list[ToolSpec]:
        """Every tool listed (the catalog the edges offer from, each tenant its allowed)."""
        return [t.spec for _, t in sorted(self._tools.items())]

    def spec(self, name: str) -> ToolSpec | None:
        listed = self._tools.get(name)
        return listed.spec if listed is not None else None

    async def call(
        self, tenant: str, name: str, arguments: dict[str, Any], *, idempotency_key: str
    ) -> ToolOutcome:
        listed = self._tools.get(name)
        if listed is None:
            raise UnknownTool(f"no MCP server offers {name!r}")
        if not self._allow.allows(tenant, name):
            raise ToolNotAllowed(f"tenant {tenant!r} may not call {name!r}")
        client = self._clients.get(listed.server)
        if client is None:
            raise ToolServerUnavailable(f"MCP server {listed.server!r} is not connected")
        began = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout_s):
                result = await client.call_tool(
                    listed.tool, arguments, meta={IDEMPOTENCY_META: idempotency_key}
                )
        except TimeoutError:
            raise ToolTimeout(f"{name} took longer than {self._timeout_s:g} s") from None
        except (OSError, RuntimeError, ValueError) as err:
            raise ToolServerUnavailable(f"{name}: the server failed the call: {err!r}") from err
        text = _text(result)
        size = len(text.encode())
        if size > self._max_result_bytes:
            raise ToolResultTooLarge(
                f"{name} returned {size} bytes; the limit is {self._max_result_bytes}"
            )
        took = (time.perf_counter() - began) * 1000
        return ToolOutcome(text, bool(result.is_error), round(took, 3))

    async def close(self) -> None:
        self._stop.set()
        if self._holders:
            await asyncio.gather(*self._holders, return_exceptions=True)
        self._holders.clear()

    async def _hold(self, spec: ServerSpec, ready: asyncio.Event) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        target: Any = spec.url
        if spec.command:
            command = sys.executable if spec.command[0] == "python" else spec.command[0]
            target = StdioServerParameters(command=command, args=list(spec.command[1:]))
        try:
            async with Client(target) as client:
                self._clients[spec.name] = client
                ready.set()
                await self._stop.wait()
        except Exception as err:
            log.warning("MCP server %s: %r", spec.name, err)
        finally:
            self._clients.pop(spec.name, None)
            ready.set()


def _text(result: Any) -> str:
    """A call's result as text: its text blocks joined, else its structured content as
    JSON; other blocks (images, audio) are named, not inlined."""
    texts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        texts.append(block.text if kind == "text" else f"[{kind} content]")
    if not texts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(texts)
