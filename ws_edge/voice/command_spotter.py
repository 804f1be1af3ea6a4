"""The keyword spotter for short commands over the assistant's voice ("stop", "wait", "no",
"hold on", in any language `commands` lists).

Whisper base (multilingual, the same bundled model the preprocessing worker can run,
`runtime.whisper_models`) decodes the short utterance greedily in a 3 s window, up to
`MAX_TOKENS` tokens: ~80 ms of one core here for a 1 s clip, against ~0.5 s for its usual
30 s window. The utterance's language is the session's when the client named one
(`turn_detection.language`), else the one Whisper detects among the languages that have
phrases; `commands.is_command` reads the words (with a detected language, every language's
phrases: a detection on half a second of speech is often wrong).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.whisper_models import base_path
from ws_edge.errors import CommandSpotterUnavailable
from ws_edge.voice.commands import COMMANDS, is_command
from ws_edge.voice.log_mel import SAMPLE_RATE, pcm16_tail
from ws_edge.voice.model_threads import ModelThreads

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

WINDOW_S = 3
MAX_TOKENS = 10
FRAMES_PER_S = 100  # Whisper's features: one frame every 10 ms


@dataclass(frozen=True, slots=True)
class Heard:
    text: str
    language: str  # as decoded: the session's, or the one detected
    command: bool


class CommandSpotter:
    """Blocking: `hear` runs Whisper (call it in a thread)."""

    def __init__(self, models_dir: Path, *, threads: int = 1) -> None:
        from faster_whisper import WhisperModel

        self._model: WhisperModel = WhisperModel(
            str(base_path(models_dir)), device="cpu", compute_type="int8", cpu_threads=threads
        )

    def hear(self, pcm: bytes, language: str = "") -> Heard:
        """The words of `pcm` (PCM16 16 kHz mono, the last `WINDOW_S` seconds) and whether
        they are a command."""
        from faster_whisper.tokenizer import Tokenizer

        model = self._model
        window = WINDOW_S * SAMPLE_RATE
        samples = pcm16_tail(pcm, window)
        audio = np.zeros(window, dtype=np.float32)  # silence after the speech
        audio[: len(samples)] = samples
        features = model.feature_extractor(audio)[:, : WINDOW_S * FRAMES_PER_S]
        encoded = model.encode(features)
        known = language in COMMANDS
        if not known:
            [ranked] = model.model.detect_language(encoded)
            scores: dict[str, float] = {code.strip("<|>"): p for code, p in ranked}
            language = max(COMMANDS, key=lambda code: scores.get(code, 0.0))
        tokenizer: Any = Tokenizer(model.hf_tokenizer, True, task="transcribe", language=language)
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        [result] = model.model.generate(
            encoded,
            [prompt],
            beam_size=1,
            max_length=len(prompt) + MAX_TOKENS,
            suppress_blank=True,
            suppress_tokens=[-1],
        )
        text = tokenizer.decode([t for t in result.sequences_ids[0] if t < tokenizer.eot]).strip()
        return Heard(text, language, is_command(text, language if known else ""))


class CommandJudge:
    """The edge's spotter: one model, loaded on first use, a thread, a bounded queue."""

    def __init__(
        self,
        models_dir: Path,
        *,
        threads: int = 1,
        max_waiting: int = 4,
        load: Any = None,
    ) -> None:
        self._threads = ModelThreads(
            load or (lambda: CommandSpotter(models_dir)),  # ~0.5 s, once, in the pool's thread
            CommandSpotterUnavailable,
            threads=threads,
            max_waiting=max_waiting,
            what="command spotter",
        )

    async def verdict(self, pcm: bytes, language: str = "") -> bool | None:
        """Whether `pcm` is a command, or None when too many checks already wait (overload:
        the duration rule decides). Raises `CommandSpotterUnavailable` when the model cannot
        run."""
        heard = await self._threads.run(lambda spotter, pcm: spotter.hear(pcm, language), pcm)
        return None if heard is None else heard.command

    def warm(self) -> None:
        """Load the model now (~0.5 s in its thread): the first check must answer in time."""
        self._threads.warm()

    def close(self) -> None:
        self._threads.close()
