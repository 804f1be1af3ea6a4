"""Words that stop mid-sentence (pure)."""

from __future__ import annotations

import pytest

from ws_edge.voice.unfinished import (
    CLOSED_CLASS,
    UNREADABLE_LOGPROB,
    UNSURE_LANGUAGE,
    guess_unfinished,
    sounds_unfinished,
    unreadable,
)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Can you tell me how to get to the", "en"),
        ("I would like to book a table for.", "en"),  # Whisper's period does not finish it
        ("Please remind me to call my", "en"),
        ("So I was thinking, um", "en"),
        ("What about the weather in...", "en"),  # trailing off
        ("I want to go to Paris,", "en"),
        ("Quiero reservar una mesa para", "es"),
        ("Je pense que le problème, c'est que la", "fr"),
        ("Wie wird das Wetter morgen in", "de"),
        ("我要给我弟弟买一个", "zh"),
        ("駅までの道を", "ja"),
    ],
)
def test_unfinished(text: str, language: str):
    assert sounds_unfinished(text, language)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Can you tell me how to get to the train station?", "en"),
        ("What is that", "en"),  # "that" and "this" end sentences too: not listed
        ("Turn off the lights and mach das Licht aus", "de"),
        ("Stell einen Wecker und mach das Licht aus.", "de"),  # a separable particle
        ("Was ist das", "de"),
        ("天空为什么是蓝色的", "zh"),  # a sentence-final 的
        ("¿Qué hora es?", "es"),
        ("", "en"),
        ("The sky is blue and", "xx"),  # a language without a list: the sound decides
    ],
)
def test_finished(text: str, language: str):
    assert not sounds_unfinished(text, language)


def test_the_lists_are_lower_case_single_words_or_cjk():
    for language, words in CLOSED_CLASS.items():
        for word in words:
            assert word == word.lower() and " " not in word, (language, word)


def test_the_text_models_probability_weighs_in_when_judged():
    assert guess_unfinished("Is it safe to eat raw?", "en", 0.002)  # the lists miss it
    assert not guess_unfinished("Is it safe to eat raw eggs?", "en", 0.31)
    assert not guess_unfinished("Is it safe to eat raw?", "en", -1.0)  # not judged
    assert guess_unfinished("Tell me about the", "en", 0.4)  # the lists still count


def test_words_the_asr_could_not_read_keep_the_turn_open_whatever_they_say():
    assert guess_unfinished("What time is it?", "en", 0.4, readable=False)
    assert not guess_unfinished("What time is it?", "en", 0.4, readable=True)


def test_unreadable_is_an_unsure_decode_or_an_unsure_language():
    assert not unreadable(0.0, 1.0)
    assert not unreadable(UNREADABLE_LOGPROB, UNSURE_LANGUAGE)  # the bars themselves pass
    assert unreadable(UNREADABLE_LOGPROB - 0.01, 1.0)
    assert unreadable(-0.2, UNSURE_LANGUAGE - 0.01)
