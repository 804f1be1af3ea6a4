"""Counting tokens the way the served model does, to fit history into its context."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("turnstream.assembly")


class TokenCounter(Protocol):
    def __call__(self, text: str) -> int: ...


class TokenizerCounter:
    """The model's own tokenizer (a model folder with tokenizer files)."""

    def __init__(self, path: str | Path) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path))

    def __call__(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))


def approximate_tokens(text: str) -> int:
    """About 4 bytes of UTF-8 per token (BPE on English; errs long on CJK, i.e. safe)."""
    return len(text.encode()) // 4 + 1


def chat_tokenizer(counter: TokenCounter) -> Any | None:
    """The model's tokenizer when it has a chat template (the router renders prompts with
    it to hash their KV blocks), else None."""
    tokenizer = getattr(counter, "tokenizer", None)
    return tokenizer if getattr(tokenizer, "chat_template", None) else None


def token_counter(path: str | Path | None) -> TokenCounter:
    if path and Path(path, "tokenizer_config.json").is_file():
        return TokenizerCounter(path)
    log.warning("no tokenizer at %r: counting tokens approximately (4 bytes each)", path)
    return approximate_tokens
