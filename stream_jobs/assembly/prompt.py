"""Building a turn's prompt, in the order the model reads it (pure).

1. system: the persona, then what we know about the user, then retrieved passages;
2. the history that fits: a sliding window over whole turns, newest kept, oldest dropped
   first, so the prompt plus the answer's room fits the model's context;
3. the query: `<image_N>` placeholders for the turn's images, then the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schemas.events import Message, PromptContext, Role
from schemas.languages import language_name
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
) -> tuple[list[Message], PromptContext]:
    """The prompt messages and how they were built. The system text and the query are always
    kept (the engine refuses a prompt that still does not fit, with `context_overflow`)."""
    system = system_text(persona, profile, passages, language)
    used = count_tokens(query) + MESSAGE_OVERHEAD_TOKENS
    if system:
        used += count_tokens(system) + MESSAGE_OVERHEAD_TOKENS
    kept = _window(history, budget_tokens - used)
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


def _window(history: Sequence[StoredMessage], room: int) -> list[StoredMessage]:
    """The newest whole turns (a user message and the answers after it) that fit `room`."""
    kept: list[StoredMessage] = []
    turn: list[StoredMessage] = []
    for message in reversed(history):
        turn.insert(0, message)
        if message.role != Role.USER:
            continue
        cost = sum(m.tokens + MESSAGE_OVERHEAD_TOKENS for m in turn)
        if cost > room:
            break
        room -= cost
        kept[:0] = turn
        turn = []
    return kept
