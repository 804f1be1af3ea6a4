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

import json
from typing import Any

from schemas.events import (
    OutputFormat,
    ResponseFormat,
    ToolCall,
    ToolChoice,
    ToolChoiceMode,
    ToolResult,
    ToolSpec,
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
