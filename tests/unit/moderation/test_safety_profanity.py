"""The profanity wrapper around alt-profanity-check's real model."""

from __future__ import annotations

import numpy as np
import pytest

from moderation.errors import ClassifierError
from moderation.profanity import ProfanityModel, load

profanity_check = pytest.importorskip("profanity_check.profanity_check")


def test_fast_path_matches_the_library_probabilities():
    model = load()
    assert model.fast, "the linear fast path should apply to alt-profanity-check 1.9.1"
    texts = ["hello there", "you are a fucking idiot", "what a shitty day", "kill -9 the pid"]
    expected = profanity_check.predict_prob(texts)
    assert np.allclose(model.score(texts), expected, atol=1e-6)


def test_scores_a_batch_in_one_call_with_sensible_values():
    good, bad = load().score(["Can you recommend a good book?", "fuck you, you stupid bitch"])
    assert good < 0.2
    assert bad > 0.9


def test_model_is_loaded_once():
    assert load() is load()


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_scores_zero(text):
    assert load().score([text]) == [0.0]


def test_no_texts_no_scores():
    assert load().score([]) == []


def test_odd_text_scores_within_bounds():
    odd = ["x" * 100_000, "\x00\x01\x02" * 1000, "ᚠ𝔘日本 mixed Кириллица", "\U000e0041" * 10]
    scores = load().score(odd)
    assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores)


def test_library_path_is_used_when_the_model_layout_is_unknown():
    calls = []

    def predict_prob(texts):
        calls.append(texts)
        return np.array([0.25] * len(texts))

    model = ProfanityModel(profanity_check.vectorizer, object(), predict_prob)
    assert not model.fast
    assert model.score(["a b c"]) == [0.25]
    assert calls[-1] == ["a b c"]


def test_any_failure_becomes_a_classifier_error():
    def broken(texts):
        raise MemoryError("boom")

    model = ProfanityModel(profanity_check.vectorizer, object(), broken)
    with pytest.raises(ClassifierError) as caught:
        model.score(["hello"])
    assert caught.value.code == "classifier_error"


def test_hand_rolled_tfidf_matches_the_vectorizer_on_varied_text():
    """`_features` reproduces `vectorizer.transform` (tokens, stop words, repeats, case,
    unicode, out-of-vocabulary words) to the last bit that matters."""
    from profanity_check import profanity_check as library

    model = load()
    rng = np.random.default_rng(11)
    vocabulary = list(library.vectorizer.vocabulary_)
    texts = [
        "The the THE the, stupid STUPID idiot!",
        "naïve café déjà vu — ünïcödé wörds and 日本語",
        "qwertyuiop asdfghjkl zxcvbnm",  # nothing in the vocabulary
        "a an the of",  # stop words only
    ]
    texts += [" ".join(rng.choice(vocabulary, size=int(rng.integers(1, 60)))) for _ in range(40)]
    expected = library.vectorizer.transform(texts).toarray()
    for text, row in zip(texts, expected, strict=True):
        features = model._features(text)
        dense = np.zeros(len(row))
        dense[features.indices] = features.values
        np.testing.assert_allclose(dense, row, atol=1e-12)
    np.testing.assert_allclose(model._score_fast(texts), library.predict_prob(texts), atol=1e-9)
