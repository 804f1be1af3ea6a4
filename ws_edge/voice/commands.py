"""Is a short utterance over the assistant's voice a command to stop it? (pure)

A command ("stop", "wait", "hold on", "no"; per language) interrupts the voice at once; a
backchannel ("uh-huh", "yeah", "okay") does not. The words come from a keyword spotter
(`command_spotter`); this decides from them. The phrases are everyday ways to stop or hold a
speaker, written per language from usage, not fitted to a test set (the benchmark's held-out
set, `bench/turn_sets/interruptions_heldout.jsonl`, was written before they were read
against any transcript).

A command is a short utterance (at most `MAX_WORDS` words, or `MAX_CJK_CHARS` characters in
a language written without spaces) holding one of the phrases as whole words: "okay stop",
"no no", "wait please" are commands, "I know", "yeah okay", "not bad" are not.
"""

from __future__ import annotations

import re
import unicodedata

MAX_WORDS = 4
MAX_CJK_CHARS = 8

# fmt: off
COMMANDS: dict[str, tuple[str, ...]] = {
    "en": (
        "stop", "wait", "no", "nope", "hold on", "hang on", "hold it", "pause", "cancel",
        "enough", "quiet", "be quiet", "shut up", "one moment", "one second", "one sec",
        "just a moment", "just a second", "never mind", "nevermind", "excuse me", "not that",
        "that's wrong", "wrong", "hey",
    ),
    "es": (
        "para", "pare", "parar", "espera", "espere", "esperá", "no", "basta", "alto",
        "detente", "deténgase", "un momento", "momento", "un segundo", "cállate", "calla",
        "silencio", "cancela", "cancelar", "oye", "ya basta", "déjalo",
    ),
    "fr": (
        "arrête", "arrêtez", "arrete", "stop", "attends", "attendez", "non", "une seconde",
        "un instant", "un moment", "tais-toi", "taisez-vous", "silence", "pause", "annule",
        "ça suffit", "suffit", "laisse tomber",
    ),
    "de": (
        "stopp", "stop", "halt", "warte", "warten sie", "wart mal", "nein", "moment",
        "einen moment", "augenblick", "hör auf", "aufhören", "ruhe", "sei still", "pause",
        "abbrechen", "genug", "vergiss es",
    ),
    "it": (
        "basta", "stop", "aspetta", "aspetti", "fermati", "ferma", "no", "un momento",
        "un attimo", "silenzio", "zitto", "pausa", "annulla",
    ),
    "pt": (
        "para", "pare", "espera", "espere", "não", "chega", "basta", "um momento",
        "um segundo", "calma", "silêncio", "cancela", "pausa",
    ),
    "zh": (
        "停", "停下", "停止", "等一下", "等等", "等会", "慢着", "不对", "不是", "不要",
        "别说了", "不要说了", "闭嘴", "安静", "暂停", "取消", "算了", "够了",
    ),
    "ja": (
        "止めて", "やめて", "ストップ", "待って", "ちょっと待って", "いいえ", "違う",
        "静かに", "黙って", "もういい", "キャンセル",
    ),
}
# fmt: on

# written without spaces between words: phrases match inside the text
CJK_LANGUAGES = frozenset({"zh", "ja"})
_PUNCTUATION = re.compile(r"[^\w\s'-]+", re.UNICODE)


def normalized(text: str) -> str:
    """Lower case, NFC, punctuation (bar apostrophes and hyphens inside words) as spaces,
    one space between words."""
    text = unicodedata.normalize("NFC", text).lower().replace("\u2019", "'")
    return " ".join(_PUNCTUATION.sub(" ", text).replace(" - ", " ").split())


def _cjk(text: str) -> bool:
    return any(
        "\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"
        for ch in text
    )


def _one_period(items: list[str]) -> list[str]:
    """A phrase said (or decoded) over and over, the last time cut short, once: Whisper
    repeats a short utterance to fill its window ("wait wait wait", "wait a second wait a")."""
    for period in range(1, len(items)):
        repeated = len(items) - period >= min(period, 2)  # at least two items said again
        if repeated and all(items[i] == items[i % period] for i in range(len(items))):
            return items[:period]
    return items


def is_command(text: str, language: str = "") -> bool:
    """The utterance `text` (a transcript) asks the assistant to stop or hold. `language`
    narrows the phrases to one language's ('' or an unknown one: every language's)."""
    said = normalized(text)
    if not said:
        return False
    phrases = COMMANDS.get(language) or tuple(p for ps in COMMANDS.values() for p in ps)
    if _cjk(said):
        compact = said.replace(" ", "")
        readings = {compact, "".join(_one_period(list(compact)))}  # "等等" is said twice
        return any(
            len(reading) <= MAX_CJK_CHARS and _cjk(p) and p in reading
            for reading in readings
            for p in phrases
        )
    words = said.split()
    readings = {" ".join(words), " ".join(_one_period(words))}
    return any(
        len(reading.split()) <= MAX_WORDS and f" {normalized(p)} " in f" {reading} "
        for reading in readings
        for p in phrases
        if not _cjk(p)
    )
