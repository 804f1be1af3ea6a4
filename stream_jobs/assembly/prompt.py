"""Building a turn's prompt, in the order the model reads it (pure).

1. system: the persona, then what we know about the user, then retrieved passages;
2. the history that fits, whole turns, oldest dropped first, so the prompt plus the answer's
   room fits the model's context. Dropped in blocks (`history_block_tokens`), not one turn
   per turn: a window that slid by a turn each turn changed the prompt right after the
   system message every time, and the engine's prefix cache then held nothing of the
   history for the next turn. Dropping a block's worth at once keeps the window's start
   (and so the cached prefix) the same for the turns until the next block is due;
3. the query: `<image_N>` placeholders for the turn's images, then the text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schemas.events import Message, PromptContext, Role, ToolChoice, ToolSpec
from schemas.languages import language_name
from schemas.tools import choice_in_force, tools_preamble
from stream_jobs.assembly.state import StoredMessage

MESSAGE_OVERHEAD_TOKENS = 4  # role markers and separators of a chat template, per message


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of retrieved context."""

    id: str
    text: str
    score: float


def with_image_placeholders(text: str, image_count: int) -> str:
    """The user's text as the model reads it: `<image_N>` for each image, then the query."""
    placeholders = [f"<image_{n}>" for n in range(1, image_count + 1)]
    return "\n".join([*placeholders, text]) if placeholders else text


def carried_history(
    messages: Sequence[Message], count_tokens: Callable[[str], int]
) -> list[StoredMessage]:
    """The history a stateless client sent with its turn, as the stored one is kept (its
    tokens counted once here): the prompt is built from it instead."""
    return [StoredMessage(m.role, m.content, count_tokens(m.content)) for m in messages]


def with_instructions(persona: str, instructions: str) -> str:
    """The deployment's persona, then the client's own system message: the client adds to
    the deployment's rules, it does not replace them."""
    return "\n\n".join(part for part in (persona, instructions) if part)


def with_tools(system: str, tools: list[ToolSpec], choice: ToolChoice | None) -> str:
    """The system message, then the tools the turn offers and how to call them (nothing
    when it has none or may not call them)."""
    if choice_in_force(tools, choice) is None:
        return system
    return "\n\n".join(part for part in (system, tools_preamble(tools)) if part)


def system_text(persona: str, profile: str, passages: Sequence[Passage], language: str = "") -> str:
    """`language`: the ISO 639-1 code the user spoke in, when the ASR heard one other than
    English: the model is told to answer in it (a small model otherwise drifts to English)."""
    parts = [persona] if persona else []
    name = language_name(language) if language != "en" else ""
    if name:
        parts.append(f"The user is speaking {name}. Answer in {name}.")
    if profile:
        parts.append(f"About the user: {profile}")
    if passages:
        context = "\n".join(f"[{i}] {p.text}" for i, p in enumerate(passages, 1))
        parts.append(
            "Use this context when it helps; say so when it does not answer the question.\n"
            + context
        )
    return "\n\n".join(parts)


def assemble(
    *,
    persona: str,
    profile: str,
    passages: Sequence[Passage],
    history: Sequence[StoredMessage],
    query: str,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    language: str = "",
    history_block_tokens: int = 0,
) -> tuple[list[Message], PromptContext]:
    """The prompt messages and how they were built. The system text and the query are always
    kept (the engine refuses a prompt that still does not fit, with `context_overflow`).
    `history_block_tokens`: history is dropped in multiples of it (0: a turn at a time)."""
    system = system_text(persona, profile, passages, language)
    used = count_tokens(query) + MESSAGE_OVERHEAD_TOKENS
    if system:
        used += count_tokens(system) + MESSAGE_OVERHEAD_TOKENS
    kept = _window(history, budget_tokens - used, history_block_tokens)
    used += sum(m.tokens + MESSAGE_OVERHEAD_TOKENS for m in kept)
    messages = [Message(Role.SYSTEM, system)] if system else []
    messages += [Message(m.role, m.content) for m in kept]
    messages.append(Message(Role.USER, query))
    context = PromptContext(
        history_messages=len(kept),
        dropped_messages=len(history) - len(kept),
        prompt_tokens=used,
        retrieved=[p.id for p in passages],
        profile=bool(profile),
    )
    return messages, context


def history_block_tokens(budget_tokens: int, block: float) -> int:
    """The block the prompt's history is dropped by: a share of the prompt's budget (the
    context less the answer's room), the same for consecutive turns that ask for the same
    answer length (a share of what the turn leaves for history would move with the query's
    length and undo the point)."""
    return int(budget_tokens * block)


def _window(history: Sequence[StoredMessage], room: int, block_tokens: int) -> list[StoredMessage]:
    """The newest whole turns (a user message and the answers after it) that fit `room`,
    the oldest dropped in multiples of `block_tokens`: what must go is rounded up to a
    block, so the start stays put while the history grows by less than a block. The
    rounding is on the history's own length, not on the turn, so consecutive turns agree."""
    turns = _turns(history)
    costs = [sum(m.tokens + MESSAGE_OVERHEAD_TOKENS for m in turn) for turn in turns]
    excess = sum(costs) - room
    if excess <= 0:
        return list(history)
    target = math.ceil(excess / block_tokens) * block_tokens if block_tokens > 0 else excess
    dropped = first = 0
    while first < len(turns) and dropped < target:
        dropped += costs[first]
        first += 1
    return [m for turn in turns[first:] for m in turn]


def _turns(history: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """The history cut into turns: each user message with the answers after it (answers
    before the first user message, if any, are a turn of their own)."""
    turns: list[list[StoredMessage]] = []
    for message in history:
        if message.role == Role.USER or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns
