"""Prompt messages of a turn: system persona, the conversation so far, the new question."""

from __future__ import annotations

from collections.abc import Sequence

from schemas.events import Message, Role


def build_messages(system_prompt: str, history: Sequence[Message], text: str) -> list[Message]:
    messages = [Message(Role.SYSTEM, system_prompt)] if system_prompt else []
    messages.extend(history)
    messages.append(Message(Role.USER, text))
    return messages


def history_after(turn_text: str, answer: str) -> list[Message]:
    """What a finished turn adds to the history: the question and the answer the user got."""
    added = [Message(Role.USER, turn_text)]
    if answer:
        added.append(Message(Role.ASSISTANT, answer))
    return added
