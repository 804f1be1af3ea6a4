"""A turn's tools, tool choice and tool results checked and turned into the contract's
(pure). Each tool's `parameters` is held to the same rules as a response format's schema
(`response_format.schema_text`: valid, local, shallow, bounded), since it is compiled into
a grammar on the inference worker too."""

from __future__ import annotations

from collections.abc import Sequence

from schemas.events import ToolChoice, ToolChoiceMode, ToolResult, ToolSpec
from schemas.tools import choice_in_force
from ws_edge.errors import InvalidMessage
from ws_edge.messages import (
    CreateTurn,
    FunctionTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
    ToolChoiceOption,
)
from ws_edge.response_format import schema_text

CODE = "invalid_tools"
ANY_OBJECT = '{"type":"object"}'


def turn_tools(
    msg: CreateTurn, *, max_schema_bytes: int
) -> tuple[list[ToolSpec], ToolChoice | None, list[ToolResult]]:
    """(tools, choice, results) of the turn, or `InvalidMessage` saying what is wrong."""
    tools, choice = offered_tools(msg.tools, msg.tool_choice, max_schema_bytes=max_schema_bytes)
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
    given: Sequence[FunctionTool], choice: ToolChoiceOption | None, *, max_schema_bytes: int
) -> tuple[list[ToolSpec], ToolChoice | None]:
    """A turn's or a session's tools and tool choice, checked (`session.update` checks its
    own once, when it is set)."""
    tools: list[ToolSpec] = []
    for i, tool in enumerate(given):
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
    return tools, _choice(choice, tools)


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
