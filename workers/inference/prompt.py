"""The engine's last line of defence on prompt length (the assembly job fits the history
by its own count; the engine's exact count can still differ by the template's tokens)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas.events import Message, Role


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
