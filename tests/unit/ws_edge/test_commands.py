"""Which short utterances over the assistant's voice are commands (pure)."""

from __future__ import annotations

import pytest

from ws_edge.voice.commands import COMMANDS, is_command, normalized


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Stop.", "en"),
        ("Wait!", "en"),
        ("No.", "en"),
        ("Hold on.", "en"),
        ("Okay, stop.", "en"),
        ("No, no.", "en"),
        ("Wait Wait Wait Wait Wait Wait", "en"),  # Whisper filling its window
        ("Wait a second. Wait a", "en"),
        ("Espera.", "es"),
        ("un momento un momento un momento un", "es"),
        ("停。", "zh"),
        ("等一下", "zh"),
        ("别说了\uff01", "zh"),  # a full-width "!"
        ("Arrête !", "fr"),
        ("Tais-toi.", "fr"),
        ("Hör auf.", "de"),
        ("ちょっと待って", "ja"),
        ("Stop", ""),  # language unknown: every language's phrases
        ("Basta.", ""),
    ],
)
def test_commands(text: str, language: str):
    assert is_command(text, language)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Yeah.", "en"),
        ("Okay.", "en"),
        ("Uh-huh.", "en"),
        ("I know.", "en"),  # "no" inside a word is not "no"
        ("Got it. Got it. Got", "en"),
        ("Not bad at all, go on with the story", "en"),  # too long to be a command
        ("Stop talking about the weather and tell me about the sea", "en"),
        ("Vale.", "es"),
        ("好的。", "zh"),
        ("不错", "zh"),  # "not bad": 不 alone is no command
        ("是的", "zh"),
        ("D'accord.", "fr"),
        ("Genau.", "de"),
        ("", "en"),
        ("...", "en"),
    ],
)
def test_not_commands(text: str, language: str):
    assert not is_command(text, language)


def test_a_language_narrows_the_phrases():
    assert is_command("Para.", "es")
    assert not is_command("Para.", "en")  # "para" means nothing to stop in English
    assert is_command("Para.", "")


def test_normalized_keeps_apostrophes_and_hyphens_inside_words():
    assert normalized("  That\u2019s WRONG!! ") == "that's wrong"
    assert normalized("Tais-toi.") == "tais-toi"
    assert normalized("a - b") == "a b"


def test_every_phrase_is_a_command_in_its_own_language():
    for language, phrases in COMMANDS.items():
        for phrase in phrases:
            assert is_command(phrase, language), (language, phrase)
