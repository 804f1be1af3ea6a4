"""A calculator MCP server over stdio: `python -m harness.mcp_servers.calculator`."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("calculator")


@server.tool(description="Add two numbers")
def add(a: float, b: float) -> float:
    return a + b


@server.tool(description="Multiply two numbers")
def multiply(a: float, b: float) -> float:
    return a * b


@server.tool(description="Divide a by b")
def divide(a: float, b: float) -> float:
    if b == 0:
        raise ToolError("division by zero")
    return a / b


@server.tool(description="Wait, then answer (for timeouts)")
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@server.tool(description="A long text (for size limits)")
def huge(characters: int) -> str:
    return "x" * characters


if __name__ == "__main__":
    server.run("stdio")
