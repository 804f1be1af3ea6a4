"""A turn's tools, tool choice and tool results checked and turned into the contract's
(pure). Each tool's `parameters` is held to the same rules as a response format's schema
(`response_format.schema_text`: valid, local, shallow, bounded), since it is compiled into
a grammar on the inference worker too. An `mcp` entry brings in the tools of one of the
deployment's MCP servers that the tenant may call (`ws_edge.server_tools`); a turn offers
the client's own functions or the deployment's tools, not both (yet)."""

from __future__ import annotations

from collections.abc import Sequence

from schemas.events import ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from schemas.tools import choice_in_force, split_qualified
from ws_edge.errors import InvalidMessage, ToolsUnavailable
from ws_edge.messages import (
    CreateTurn,
    FunctionTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    McpTool,
    NamedToolChoice,
    ToolChoiceOption,
)
from ws_edge.response_format import schema_text
from ws_edge.server_tools import ServerTools

CODE = "invalid_tools"
ANY_OBJECT = '{"type":"object"}'


def turn_tools(
    msg: CreateTurn,
    *,
    max_schema_bytes: int,
    tenant: str = "",
    server_tools: ServerTools | None = None,
) -> tuple[list[ToolSpec], ToolChoice | None, list[ToolResult]]:
    """(tools, choice, results) of the turn, or `InvalidMessage` saying what is wrong."""
    tools, choice = offered_tools(
        msg.tools,
        msg.tool_choice,
        max_schema_bytes=max_schema_bytes,
        tenant=tenant,
        server_tools=server_tools,
    )
    shaped = isinstance(msg.response_format, JsonObjectFormat | JsonSchemaFormat)
    if choice_in_force(tools, choice) is not None and shaped:
        raise InvalidMessage(
            "response_format and tools together are not supported yet: send one", code=CODE
        )
    results = [ToolResult(r.call_id, r.output) for r in msg.tool_results]
    if len({r.call_id for r in results}) != len(results):
        raise InvalidMessage("tool_results: a call_id is answered twice", code=CODE)
    return tools, choice, results


def offered_tools(
    given: Sequence[FunctionTool | McpTool],
    choice: ToolChoiceOption | None,
    *,
    max_schema_bytes: int,
    tenant: str = "",
    server_tools: ServerTools | None = None,
) -> tuple[list[ToolSpec], ToolChoice | None]:
    """A turn's or a session's tools and tool choice, checked (`session.update` checks its
    own once, when it is set)."""
    tools: list[ToolSpec] = []
    for i, tool in enumerate(given):
        if isinstance(tool, McpTool):
            tools.extend(_server_tools(i, tool, tools, tenant, server_tools or ServerTools()))
            continue
        fn = tool.function
        if any(t.name == fn.name for t in tools):
            raise InvalidMessage(f"tools[{i}]: the name {fn.name!r} is used twice", code=CODE)
        if fn.strict is False:
            raise InvalidMessage(
                f"tools[{i}].function.strict: false is not supported (calls always follow "
                "the parameters' schema); leave it out or send true",
                code=CODE,
            )
        parameters = ANY_OBJECT
        if fn.parameters is not None:
            parameters = schema_text(
                fn.parameters,
                max_bytes=max_schema_bytes,
                what=f"tools[{i}].function.parameters",
                code=CODE,
            )
        tools.append(ToolSpec(fn.name, fn.description, parameters))
    if any(t.server for t in tools) and not all(t.server for t in tools):
        raise InvalidMessage(
            "tools: a turn offers its own functions or the deployment's (mcp) tools, not "
            "both yet: their calls are answered by different sides",
            code=CODE,
        )
    return tools, _choice(choice, tools)


def _server_tools(
    i: int, given: McpTool, offered: list[ToolSpec], tenant: str, server_tools: ServerTools
) -> list[ToolSpec]:
    if server_tools.allow.rules and not server_tools.listed:
        raise ToolsUnavailable(
            f"tools[{i}]: the deployment's tools are not listed right now (its tools worker "
            "is down or starting); retry shortly"
        )
    allowed = server_tools.of_server(tenant, given.server_label)
    if not allowed:
        known = ", ".join(server_tools.servers()) or "none"
        raise InvalidMessage(
            f"tools[{i}]: no tool of MCP server {given.server_label!r} is offered to you "
            f"(the deployment's servers: {known}; which tools a tenant may call is the "
            "deployment's choice)",
            code=CODE,
        )
    only = given.allowed_tools
    found = [t for t in allowed if only is None or split_qualified(t.name)[1] in only]
    missing = set(given.allowed_tools or ()) - {split_qualified(t.name)[1] for t in found}
    if missing or not found:
        raise InvalidMessage(
            f"tools[{i}].allowed_tools: {', '.join(sorted(missing)) or 'none'} of server "
            f"{given.server_label!r}: not offered to you (you may call "
            f"{', '.join(t.name for t in allowed)})",
            code=CODE,
        )
    if any(o.name == t.name for o in offered for t in found):
        raise InvalidMessage(
            f"tools[{i}]: server {given.server_label!r} is listed twice", code=CODE
        )
    return found


def _choice(given: ToolChoiceOption | None, tools: list[ToolSpec]) -> ToolChoice | None:
    if given is None:
        return None
    if not tools:
        raise InvalidMessage("tool_choice needs tools", code=CODE)
    if isinstance(given, NamedToolChoice):
        name = given.function.name
        if all(t.name != name for t in tools):
            raise InvalidMessage(f"tool_choice names {name!r}, which is not in tools", code=CODE)
        return ToolChoice(ToolChoiceMode.NAMED, name)
    return ToolChoice(ToolChoiceMode(given))
