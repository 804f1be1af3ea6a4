"""The text model that says whether a spoken guess's words end the user's message: the
bundled SmolLM2 on sentences of neither benchmark set, half and whole."""

from __future__ import annotations

import pytest

from runtime.settings import Settings
from runtime.smollm2 import convert, default_model_dir
from workers.preprocess.sentence_end import NOT_JUDGED, SentenceEnd
from ws_edge.voice.unfinished import ENDS_SENTENCE_BAR, guess_unfinished

HALVES_AND_WHOLES = [
    ("Can you play some music by the", "Can you play some music by the Beatles?"),
    ("How far is the moon from", "How far is the moon from the earth?"),
    ("What should I cook for dinner with", "What should I cook for dinner with rice and beans?"),
    ("Remind me to water the plants on", "Remind me to water the plants on Friday."),
    ("Why is the ocean", "Why is the ocean salty?"),  # no closed-class word to go by
]


@pytest.fixture(scope="module")
def model() -> SentenceEnd:
    judge = SentenceEnd(convert(default_model_dir(Settings())))  # a no-op once converted
    judge.load()
    return judge


@pytest.mark.parametrize(("half", "whole"), HALVES_AND_WHOLES)
def test_half_a_sentence_scores_far_under_the_whole_one(model, half, whole):
    assert model.probability(half, "en") < model.probability(whole, "en") / 10
    # Whisper's "?" after half a question is dropped before reading
    assert model.probability(half + "?", "en") == model.probability(half, "en")


@pytest.mark.parametrize(("half", "whole"), HALVES_AND_WHOLES)
def test_with_the_word_lists_the_edge_keeps_listening_after_a_half_only(model, half, whole):
    assert guess_unfinished(half, "en", model.probability(half, "en"))
    assert not guess_unfinished(whole, "en", model.probability(whole, "en"))


def test_the_model_catches_a_half_that_ends_on_no_listed_word(model):
    assert not guess_unfinished("Why is the ocean", "en")  # the lists alone: finished
    assert model.probability("Why is the ocean", "en") < ENDS_SENTENCE_BAR


def test_other_languages_and_no_words_are_not_judged(model):
    assert model.probability("¿Por qué el mar es", "es") == NOT_JUDGED
    assert model.probability(" ... ", "en") == NOT_JUDGED
    assert model.probability("Why is the ocean", "") != NOT_JUDGED  # tiny.en: no language


def test_the_first_guess_that_asks_starts_the_load_and_goes_unjudged(model, tmp_path):
    lazy = SentenceEnd(convert(default_model_dir(Settings())))
    assert not lazy.judges("What time is it", "en")  # not loaded: the word lists decide
    assert lazy._loading is not None
    lazy._loading.join(timeout=120)
    assert lazy.judges("What time is it", "en")
    assert not lazy.judges("¿Qué hora es?", "es")  # English only
    assert not lazy.judges("?", "en")  # no words

    missing = SentenceEnd(tmp_path / "no-model")
    assert not missing.judges("What time is it", "en")
    assert missing._loading is not None
    missing._loading.join(timeout=120)
    assert missing.failed and not missing.judges("What time is it", "en")  # never again
