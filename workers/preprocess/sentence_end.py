"""Does the user's message end here? A text model's answer for the voice loop's guesses.

The edge ends a spoken turn on a pause when the audio turn model says the user finished and
the words of the guess started at that pause agree (`ws_edge.voice.unfinished`). Word lists
catch a sentence that stops on "the" or "and"; a language model also catches one that stops
on "… why the sky is" or "… eat raw". The bundled SmolLM2-135M-Instruct (the default
engine's model, `runtime.smollm2`) reads the transcript as the start of a user message and
gives the probability that the message ends there: the next token is `<|im_end|>` or a
sentence's final punctuation, the transcript's own trailing punctuation removed (Whisper
puts "?" after half a question). One forward pass, 90-110 ms of one core for a spoken
question (the last position's logits only).

English only (the model's language); other languages get -1 (not judged: the word lists
decide). Only for guesses (`TurnSubmitted.judge_sentence_end`), and beside the answer: the
preprocessing worker publishes the transcript and the enriched turn first, then the verdict
(`SentenceEndJudged`), which only the edge's end of turn waits on.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("turnstream.preprocess")

NOT_JUDGED = -1.0
LANGUAGES = frozenset({"en", ""})  # "": tiny.en's transcripts (English only) carry no language
_TRAILING = re.compile(r"[\s.?!…,;:]+$")


def _words(text: str, language: str) -> str:
    """What the model reads of a transcript: its words without trailing punctuation, or ""
    (no words, or a language it does not judge)."""
    return _TRAILING.sub("", text.strip()) if language in LANGUAGES else ""


class SentenceEnd:
    """Blocking (call it in a thread); the model loads on first use, or with `load()`.

    The worker asks `judges` first: the model (~0.5 GB resident, ~1 s to load) then loads in
    the background on the first guess that wants it, and until it has, guesses go with the
    word lists alone. A deployment without semantic_vad sessions never loads it."""

    def __init__(self, model_dir: Path, *, threads: int = 1) -> None:
        self._model_dir = model_dir
        self._threads = threads
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._ends: list[int] = []
        self._loading: threading.Thread | None = None
        self.failed = False  # it did not load: never judges (logged once)

    def load(self) -> None:
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(self._threads)
        tokenizer: Any = AutoTokenizer.from_pretrained(self._model_dir)
        model = AutoModelForCausalLM.from_pretrained(self._model_dir, dtype=torch.float32)
        end_of_message = tokenizer.convert_tokens_to_ids("<|im_end|>")
        marks = [tokenizer.encode(m, add_special_tokens=False)[0] for m in (".", "?", "!")]
        self._tokenizer, self._model = tokenizer, model.eval()
        self._ends = [end_of_message, *marks]

    def judges(self, text: str, language: str = "") -> bool:
        """Whether the model reads this transcript now: its language, some words, and the
        model loaded (the first ask starts loading it in the background)."""
        if not _words(text, language) or self.failed:
            return False
        if self._model is None:
            self._load_in_background()
            return False
        return True

    def _load_in_background(self) -> None:
        with self._lock:
            if self._loading is not None or self._model is not None:
                return
            self._loading = threading.Thread(
                target=self._load_quietly, name="sentence-end-load", daemon=True
            )
            self._loading.start()

    def _load_quietly(self) -> None:
        try:
            self.load()
        except Exception as exc:  # guesses go on with the word lists alone
            self.failed = True
            log.warning("the sentence-end model did not load: %s", exc)

    def probability(self, text: str, language: str = "") -> float:
        """P(the message ends after `text`), or `NOT_JUDGED` for another language or no text
        (loads the model first if it has not)."""
        words = _words(text, language)
        if not words:
            return NOT_JUDGED
        import torch

        with self._lock:
            self._load_locked()
            ids = self._tokenizer(f"<|im_start|>user\n{words}", return_tensors="pt").input_ids
            with torch.no_grad():
                # the last position's logits alone: ~15% less CPU than all of them
                logits = self._model(ids, logits_to_keep=1).logits[0, -1]
            return round(float(torch.softmax(logits, -1)[self._ends].sum()), 6)
