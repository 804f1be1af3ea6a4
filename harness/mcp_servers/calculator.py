"""A calculator MCP server over stdio: `python -m harness.mcp_servers.calculator`."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("calculator")
PURE = ToolAnnotations(read_only_hint=True)  # none of its tools changes anything


@server.tool(annotations=PURE, description="Add two numbers")
def add(a: float, b: float) -> float:
    return a + b


@server.tool(annotations=PURE, description="Multiply two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@server.tool(annotations=PURE, description="Divide a by b")
def divide(a: float, b: float) -> float:
    if b == 0:
        raise ToolError("division by zero")
    return a / b


@server.tool(annotations=PURE, description="Wait, then answer (for timeouts)")
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@server.tool(annotations=PURE, description="A long text (for size limits)")
def huge(characters: int) -> str:
    return "x" * characters


if __name__ == "__main__":
    server.run("stdio")
