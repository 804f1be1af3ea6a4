"""Llama Guard through transformers, loaded from a local folder; `classify` never raises.

Nothing is downloaded: `GuardModel.load(path)` reads the tokenizer and causal LM from a
folder with `local_files_only=True`. To use the real model:

1. On a machine with internet access and a Hugging Face account that accepted the Llama 3
   licence: `huggingface-cli download meta-llama/Llama-Guard-3-1B --local-dir Llama-Guard-3-1B`
   (or `meta-llama/Llama-Guard-3-8B`; 1B is the one usable on CPU, roughly 1-3 s a turn).
2. Copy that folder to the audit host (config.json, tokenizer files, *.safetensors).
3. Point the audit worker at it (e.g. `GuardModel.load("/models/Llama-Guard-3-1B")`).

Prompt: we always render the official template text with `guard_prompt.build_prompt` and do
not use the tokenizer's chat template. The Llama Guard 3 templates differ between 1B (list
content parts) and 8B (string content) and hard-code the full category list; rendering it
ourselves keeps custom categories and input caps in force. When the tokenizer has the
Llama 3 header tokens (the real weights) the text is wrapped as one user message followed by
an empty assistant header, exactly what the chat template produces; otherwise (the tiny test
model) the plain prompt is used.

The prompt is truncated to the model's context less the answer budget by dropping the middle
of the token sequence, so the task line and the closing instruction survive. Any failure
(tokenizer, generation, out of memory, odd text) is returned as a GuardResult with `error`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workers.audit.guard_prompt import (
    ALL_CODES,
    GuardResult,
    build_prompt,
    guard_error,
    parse_answer,
)

MAX_NEW_TOKENS = 10
_LLAMA3_HEADER = "<|start_header_id|>"
_LLAMA3_USER = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
_LLAMA3_TAIL = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


class GuardModel:
    enforces = True  # Llama Guard's verdicts feed the blacklist and alert policy
    rereads_windows = False  # a second model: every answer is read again

    def __init__(
        self,
        tokenizer: Any,
        model: Any,
        categories: Iterable[str] = ALL_CODES,
        max_new_tokens: int = MAX_NEW_TOKENS,
        name: str = "llama-guard",
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.model = model
        self.categories = tuple(categories)
        self.max_new_tokens = max_new_tokens
        self._llama3 = _LLAMA3_HEADER in tokenizer.get_vocab()
        limit = getattr(model.config, "max_position_embeddings", None) or 2048
        self.max_prompt_tokens = max(16, int(limit) - max_new_tokens)
        self._lock = threading.Lock()  # generate() is not re-entrant on one model

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> GuardModel:
        """Tokenizer + causal LM from a local folder (no network), eval mode, CPU unless the
        model folder is moved by the caller."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = str(path)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        model.eval()
        kwargs.setdefault("name", Path(folder).name)
        return cls(tokenizer, model, **kwargs)

    def render(self, user: str, assistant: str) -> str:
        prompt = build_prompt(user, assistant, self.categories)
        return f"{_LLAMA3_USER}{prompt}{_LLAMA3_TAIL}" if self._llama3 else prompt

    def _prompt_ids(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= self.max_prompt_tokens:
            return ids
        head = self.max_prompt_tokens // 2
        tail = self.max_prompt_tokens - head
        return ids[:head] + ids[-tail:]

    def classify(self, user: str, assistant: str) -> GuardResult:
        """Greedy-decode the guard's answer for one exchange; never raises."""
        try:
            import torch

            ids = self._prompt_ids(self.render(user, assistant))
            input_ids = torch.tensor([ids], dtype=torch.long)
            pad = self.tokenizer.pad_token_id
            if pad is None:
                pad = self.tokenizer.eos_token_id
            with self._lock, torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                )
            text = self.tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
            return parse_answer(text)
        except Exception as exc:
            return guard_error(exc)
