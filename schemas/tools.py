"""Function calling's contract: the tools a turn offers, the calls an answer makes, the
results a client returns, and how all three read in a prompt (pure; no I/O).

One text format for every model (Hermes-style, which many open models were trained on):
tools are described in the system message; a call is
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the assistant's answer; a
result is `<tool_response>...</tool_response>` in the next user message. The assembly job
writes prompts in it and the inference worker holds the model to it with guided decoding
(`call_constraint`) and reads the calls back out (`split_calls`), so a call is always
well-formed, whatever the model.
"""

from __future__ import annotations

import fnmatch
import json
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from schemas.errors import SettingsError
from schemas.events import (
    OutputFormat,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolResult,
    ToolSpec,
    TurnSubmitted,
)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESULT_OPEN, RESULT_CLOSE = "<tool_response>", "</tool_response>"


def call_id(turn_id: str, index: int) -> str:
    return f"call_{turn_id[-16:]}_{index}"


def tools_preamble(tools: list[ToolSpec]) -> str:
    """The system message's description of the tools and of how to call one."""
    listed = "\n".join(
        json.dumps(
            {
                "name": t.name,
                "description": t.description,
                "parameters": json.loads(t.parameters),
            },
            ensure_ascii=False,
        )
        for t in tools
    )
    return (
        "You can call these tools:\n"
        f"{listed}\n"
        "To call one, answer with "
        f'{CALL_OPEN}{{"name": <tool name>, "arguments": <arguments as JSON>}}{CALL_CLOSE}. '
        f"Its result comes back as {RESULT_OPEN}...{RESULT_CLOSE}."
    )


def call_text(calls: list[ToolCall]) -> str:
    """How calls read in the assistant's message of the history."""
    return "".join(
        f'{CALL_OPEN}{{"name":{json.dumps(c.name)},"arguments":{c.arguments}}}{CALL_CLOSE}'
        for c in calls
    )


def result_text(results: list[ToolResult]) -> str:
    """How results read in the user message that returns them."""
    return "\n".join(
        f"{RESULT_OPEN}{json.dumps({'name': r.name, 'content': r.output}, ensure_ascii=False)}"
        f"{RESULT_CLOSE}"
        for r in results
    )


def call_constraint(tools: list[ToolSpec], choice: ToolChoice) -> ResponseFormat | None:
    """What guided decoding holds the answer to. `auto`: free text, but once the model
    opens `<tool_call>` the call must be a well-formed call of one of the tools (a
    structural tag). `required`/`named`: the whole answer is one call, as JSON
    `{"name", "arguments"}` (no tags). None: no tools in play."""
    offered = [t for t in tools if choice.mode != ToolChoiceMode.NAMED or t.name == choice.name]
    if not offered or choice.mode == ToolChoiceMode.NONE:
        return None
    if choice.mode == ToolChoiceMode.AUTO:
        tag = {
            "structures": [
                {
                    "begin": f'{CALL_OPEN}{{"name":{json.dumps(t.name)},"arguments":',
                    "schema": json.loads(t.parameters),
                    "end": f"}}{CALL_CLOSE}",
                }
                for t in offered
            ],
            "triggers": [CALL_OPEN],
        }
        return ResponseFormat(type=OutputFormat.STRUCTURAL_TAG, schema=json.dumps(tag))
    one_of = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": json.loads(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in offered
    ]
    schema: dict[str, Any] = one_of[0] if len(one_of) == 1 else {"anyOf": one_of}
    return ResponseFormat(type=OutputFormat.JSON_SCHEMA, schema=json.dumps(schema), name="call")


def split_calls(text: str, turn_id: str, *, whole: bool) -> tuple[str, list[ToolCall]]:
    """(the answer's text without its calls, the calls), from what the engine generated.
    `whole`: the answer is one untagged call (`required`/`named`). A call that does not
    parse (cut by max_tokens) is left in the text, not invented."""
    if whole:
        call = _read_call(text.strip(), turn_id, 0)
        return ("", [call]) if call is not None else (text, [])
    calls: list[ToolCall] = []
    kept: list[str] = []
    rest = text
    while (start := rest.find(CALL_OPEN)) >= 0:
        end = rest.find(CALL_CLOSE, start)
        if end < 0:
            break
        call = _read_call(rest[start + len(CALL_OPEN) : end], turn_id, len(calls))
        if call is None:
            kept.append(rest[: end + len(CALL_CLOSE)])
        else:
            kept.append(rest[:start])
            calls.append(call)
        rest = rest[end + len(CALL_CLOSE) :]
    kept.append(rest)
    return "".join(kept).strip() if calls else text, calls


def _read_call(body: str, turn_id: str, index: int) -> ToolCall | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", {})
    return ToolCall(
        call_id=call_id(turn_id, index),
        name=value["name"],
        arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
    )


def choice_in_force(tools: list[ToolSpec], choice: ToolChoice | None) -> ToolChoice | None:
    """How this turn may call its tools (None: it has none, or may not call them)."""
    if not tools:
        return None
    choice = choice or ToolChoice()
    return None if choice.mode == ToolChoiceMode.NONE else choice


def whole_answer_is_a_call(choice: ToolChoice) -> bool:
    return choice.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED)


# ---- the deployment's tools (MCP servers', run by the tools worker) --------------------------

SEPARATOR = "__"  # a server's tool is offered as `<server>__<tool>` (OpenAI's names allow no dots)
_CONTINUATIONS = uuid.UUID("5f0d3c1e-7a43-4f4e-9a55-6b1f3f2c9d10")


def qualified(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_qualified(name: str) -> tuple[str, str]:
    server, sep, tool = name.partition(SEPARATOR)
    return (server, tool) if sep else ("", name)


class ToolAccessError(SettingsError):
    """The allow-list setting is unreadable (the tools worker wraps it in its own tree)."""

    code = "tools_config"


@dataclass(frozen=True, slots=True)
class AllowList:
    """Per tenant, the globs of qualified tool names it may call: `tenant=glob,glob;...`
    (`*` as the tenant: every tenant; `kv__get`, `calc__*`). Empty: no tenant may call any
    server tool (a deployment opts in, tool by tool, since tools act). The edge offers only
    what it allows; the tools worker checks it again before each call."""

    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        rules: list[tuple[str, tuple[str, ...]]] = []
        for part in filter(None, (p.strip() for p in text.split(";"))):
            tenant, sep, globs = part.partition("=")
            patterns = tuple(g.strip() for g in globs.split(",") if g.strip())
            if not sep or not tenant.strip() or not patterns:
                raise ToolAccessError(f"tool allow-list: {part!r} is not tenant=glob[,glob]")
            rules.append((tenant.strip(), patterns))
        return cls(tuple(rules))

    def allows(self, tenant: str, name: str) -> bool:
        return any(
            who in ("*", tenant) and any(fnmatch.fnmatchcase(name, g) for g in globs)
            for who, globs in self.rules
        )


def idempotency_key(call: ToolCall) -> str:
    """The key of a call's side effect. A call's id is derived from its turn and its place in
    the answer (`call_id`), and a turn has one decided answer whatever its attempts (a
    failover, a redelivery, a retry of the turn all replay it), so the id is the key."""
    return call.call_id


def continuation_id(turn_id: str) -> str:
    """The turn that returns the results of `turn_id`'s deployment tool calls: derived, so
    every retry of the answer names the same continuation."""
    return str(uuid.uuid5(_CONTINUATIONS, turn_id))


def all_server_calls(tools: list[ToolSpec], calls: list[ToolCall]) -> bool:
    """Every call is of a deployment's tool (the tools worker runs them and continues the
    turn); False when any is the client's (the client answers, as for any client call)."""
    served = {t.name for t in tools if t.server}
    return bool(calls) and all(c.name in served for c in calls)


def continuation(turn: TurnSubmitted) -> TurnSubmitted:
    """The turn that will carry the results of `turn`'s deployment tool calls: the same
    conversation, edge, options and tools, no text of its own. A forced call is not forced
    again (`required`/named become `auto`), or the model would call for ever."""
    choice = turn.tool_choice
    if choice is not None and choice.mode in (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED):
        choice = ToolChoice(ToolChoiceMode.AUTO)
    return msgspec.structs.replace(
        turn,
        turn_id=continuation_id(turn.turn_id),
        text="",
        media=[],
        truncates=[],
        tool_choice=choice,
        tool_results=[],
        tool_round=turn.tool_round + 1,
        submitted_at_ms=0.0,
    )
