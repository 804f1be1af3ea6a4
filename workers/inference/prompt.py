"""Prompt messages of a turn: system persona, the conversation so far, the new question."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas.events import Message, Role


def build_messages(system_prompt: str, history: Sequence[Message], text: str) -> list[Message]:
    messages = [Message(Role.SYSTEM, system_prompt)] if system_prompt else []
    messages.extend(history)
    messages.append(Message(Role.USER, text))
    return messages


def with_image_placeholders(text: str, image_count: int) -> str:
    """The user's text as the model reads it: `<image_N>` for each image, then the query."""
    placeholders = [f"<image_{n}>" for n in range(1, image_count + 1)]
    return "\n".join([*placeholders, text]) if placeholders else text


def history_after(turn_text: str, answer: str) -> list[Message]:
    """What a finished turn adds to the history: the question and the answer the user got."""
    added = [Message(Role.USER, turn_text)]
    if answer:
        added.append(Message(Role.ASSISTANT, answer))
    return added


def fit_messages(
    messages: Sequence[Message], count_tokens: Callable[[Sequence[Message]], int], budget: int
) -> tuple[list[Message], int]:
    """Drop the oldest history (never the system persona or the new question) until the
    prompt fits `budget` tokens; return the messages kept and how many were dropped.
    A conversation that outgrew the context keeps working instead of failing every turn."""
    kept = list(messages)
    system = 1 if kept and kept[0].role == Role.SYSTEM else 0
    dropped = 0
    while count_tokens(kept) > budget and len(kept) - system > 1:
        del kept[system]
        dropped += 1
    return kept, dropped
