"""Messages to prompt token ids through the model's own chat template, ready for the
answer (add_generation_prompt=True): what the inference worker sends its engine, and what
the router hashes to ask which engine holds the prompt's blocks (`runtime.kv_blocks`).
One function for both, so the two cannot drift apart. Pure given the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class _Message(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def encode_chat(tokenizer: Any, messages: Sequence[_Message]) -> list[int]:
    """Token ids of `messages` through the tokenizer's chat template, ready for the answer."""
    chat = [{"role": str(m.role), "content": m.content} for m in messages]
    encoded = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
    return list(encoded["input_ids"] if not isinstance(encoded, list) else encoded)
