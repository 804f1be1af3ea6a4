"""Which MCP servers a deployment lists and which of their tools each tenant may call
(pure: parsed once at start; the tools worker, next, reads them from the settings
`TURNSTREAM_MCP_SERVERS` and `TURNSTREAM_TOOL_ALLOW`).

The server list is JSON; each server has a `name` (letters, digits, `-`)
and either a `command` (a list: launched, spoken to over stdio) or a `url` (streamable
HTTP):

    [{"name": "calc", "command": ["python", "-m", "harness.mcp_servers.calculator"]},
     {"name": "kv", "url": "http://127.0.0.1:8931/mcp"}]

A tool is offered to the model as `<server>__<tool>` (OpenAI's names allow no dots).

The allow-list (`schemas.tools.AllowList`, shared with the edge, which offers only what it
allows) is `tenant=glob,glob;tenant=glob`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from schemas.tools import AllowList, ToolAccessError
from workers.tools.errors import ToolsConfigError

_NAME = re.compile(r"^[A-Za-z0-9-]{1,24}$")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    name: str
    command: tuple[str, ...] = ()  # stdio
    url: str = ""  # streamable HTTP


def parse_servers(text: str) -> list[ServerSpec]:
    if not text.strip():
        return []
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ToolsConfigError(f"the MCP server list is not JSON: {err}") from None
    if not isinstance(raw, list):
        raise ToolsConfigError("the MCP server list must be a JSON list of servers")
    servers: list[ServerSpec] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ToolsConfigError(f"MCP server [{i}] needs a name")
        name = item["name"]
        if not _NAME.match(name) or any(s.name == name for s in servers):
            raise ToolsConfigError(
                f"MCP server [{i}]: name {name!r} must be unique, 1-24 letters, digits or '-'"
            )
        command, url = item.get("command"), item.get("url")
        if (command is None) == (url is None):
            raise ToolsConfigError(f"server {name!r} needs a command (stdio) or a url, not both")
        if command is not None and (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
        ):
            raise ToolsConfigError(f"server {name!r}: command must be a non-empty list of strings")
        if url is not None and not (
            isinstance(url, str) and url.startswith(("http://", "https://"))
        ):
            raise ToolsConfigError(f"server {name!r}: url must be http(s)")
        servers.append(ServerSpec(name, tuple(command or ()), url or ""))
    return servers


def allow_list(text: str) -> AllowList:
    """The allow-list setting, parsed (an unreadable one is this package's config error)."""
    try:
        return AllowList.parse(text)
    except ToolAccessError as err:
        raise ToolsConfigError(str(err)) from None
