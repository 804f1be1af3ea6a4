"""Messages to prompt token ids with the model's own chat template, fitted to the context.

What an engine that takes token ids does before it generates: render the chat template
(add_generation_prompt=True) so prompt-token counts are exact and a prefix cache sees the
same tokens for the same history, dropping the oldest history (`fit_messages`) until the
prompt leaves room for the answer. Pure given the tokenizer; both engines use it (vLLM
with the positions its image tokens expand to as `extra_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.chat_template import encode_chat
from schemas.events import Message
from workers.inference.prompt import fit_messages


def answer_budget(max_model_len: int, max_tokens: int) -> int:
    """Prompt tokens allowed: the context less the answer's room (at most half of it)."""
    return max_model_len - min(max_tokens, max_model_len // 2)


def render_prompt(
    tokenizer: Any,
    messages: Sequence[Message],
    *,
    max_model_len: int,
    max_tokens: int,
    extra_tokens: int = 0,
) -> list[int]:
    """The prompt's token ids, the oldest history dropped until it fits `answer_budget`;
    `extra_tokens`: positions the engine adds to the ids (an image token's expansion)."""
    rendered: dict[int, list[int]] = {}

    def count(kept: Sequence[Message]) -> int:
        rendered[len(kept)] = encode_chat(tokenizer, kept)
        return len(rendered[len(kept)]) + extra_tokens

    kept, _ = fit_messages(messages, count, answer_budget(max_model_len, max_tokens))
    return rendered[len(kept)]
