"""The profanity classifier: alt-profanity-check's model (TF-IDF + linear SVM with sigmoid
calibration, trained on ~200k labelled comments), loaded once per process.

`profanity_check.predict_prob` spends ~4-8 ms per call in scikit-learn's input validation
and its per-fold calibration loop, whatever the batch size; the model itself is five linear
scorers. `ProfanityModel` reads their weights out once and scores with one sparse matrix
product (~0.3 ms), and checks at load time that it gives the library's own probabilities on
a few probe texts; if not (a different model version), it uses `predict_prob` as is.

Every failure (package missing, model file unreadable, a crash on odd input) becomes a
`ClassifierError`: the screens turn that into a verdict with `error`, never a lost turn.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from moderation.errors import ClassifierError
from moderation.normalize import cap

MAX_CHARS = 4096  # per text; the screens pass capped text already, this bounds direct use
_PROBES = ("hello there, how are you?", "you are a fucking idiot", "kill the process", "shit")


class Scorer(Protocol):
    """What the screens need: one probability per text, in one call."""

    def score(self, texts: Sequence[str]) -> list[float]: ...


class ProfanityModel:
    """Probability that each text is profane/offensive, 0.0 for texts with no words."""

    def __init__(self, vectorizer: Any, model: Any, predict_prob: Callable[[Any], Any]) -> None:
        self._vectorizer = vectorizer
        self._predict_prob = predict_prob
        self._fast: tuple[Any, Any, Any, Any] | None = None
        try:
            self._check_vectorizer(vectorizer)
            self._analyzer = vectorizer.build_analyzer()
            self._vocabulary = vectorizer.vocabulary_
            self._idf = np.asarray(vectorizer.idf_, dtype=float)
            self._fast = self._linear_parts(model)
            expected = np.asarray(predict_prob(list(_PROBES)), dtype=float)
            if not np.allclose(self._score_fast(list(_PROBES)), expected, atol=1e-6):
                self._fast = None
        except Exception:  # an unexpected model layout: the library path still works
            self._fast = None

    @property
    def fast(self) -> bool:
        """Whether scoring uses the extracted linear weights (else `predict_prob`)."""
        return self._fast is not None

    @staticmethod
    def _check_vectorizer(vectorizer: Any) -> None:
        """The settings `_features` reproduces; any other layout takes the library path."""
        expected = {"binary": False, "sublinear_tf": False, "use_idf": True, "norm": "l2"}
        for name, value in expected.items():
            if getattr(vectorizer, name) != value:
                raise ValueError(f"vectorizer {name}={getattr(vectorizer, name)!r}")

    @staticmethod
    def _linear_parts(model: Any) -> tuple[Any, Any, Any, Any]:
        """Weights (features x folds), intercepts, and sigmoid calibration a, b per fold."""
        folds = model.calibrated_classifiers_
        if model.method != "sigmoid" or len(folds[0].calibrators) != 1:
            raise ValueError("not a binary sigmoid-calibrated linear model")
        coef = np.stack([np.asarray(f.estimator.coef_, dtype=float).ravel() for f in folds], 1)
        intercept = np.array([float(np.ravel(f.estimator.intercept_)[0]) for f in folds])
        a = np.array([float(f.calibrators[0].a_) for f in folds])
        b = np.array([float(f.calibrators[0].b_) for f in folds])
        return coef, intercept, a, b

    def _score_fast(self, texts: list[str]) -> Any:
        assert self._fast is not None
        coef, intercept, a, b = self._fast
        decision = np.stack([self._features(text) @ coef for text in texts]) + intercept
        return (1.0 / (1.0 + np.exp(a * decision + b))).mean(axis=1)

    def _features(self, text: str) -> Any:
        """The TF-IDF row of one text, as a sparse (indices, values) dot-ready vector.

        Equivalent to `vectorizer.transform([text])` for this model's settings (word counts,
        idf, l2 norm; checked against the library on probes at load), without sklearn's
        per-call input validation, which cost ~10x the arithmetic: the safety worker spent
        a third of its CPU there under load."""
        counts: dict[int, int] = {}
        for token in self._analyzer(text):
            index = self._vocabulary.get(token)
            if index is not None:
                counts[index] = counts.get(index, 0) + 1
        indices = np.fromiter(counts, dtype=np.int64, count=len(counts))
        values = np.fromiter(counts.values(), dtype=float, count=len(counts))
        values *= self._idf[indices]
        norm = float(np.sqrt(values @ values))
        return _SparseRow(indices, values / norm if norm > 0 else values)

    def score(self, texts: Sequence[str]) -> list[float]:
        """One probability per text, computed in one call; raises ClassifierError only."""
        try:
            prepared = [cap(str(text), MAX_CHARS // 2, MAX_CHARS // 2) for text in texts]
            if not prepared:
                return []
            if self._fast is not None:
                probs = self._score_fast(prepared)
            else:
                probs = np.asarray(self._predict_prob(prepared), dtype=float)
            return [
                0.0 if not text.strip() else min(1.0, max(0.0, float(p)))
                for text, p in zip(prepared, probs, strict=True)
            ]
        except ClassifierError:
            raise
        except Exception as err:
            raise ClassifierError(f"profanity model failed: {err!r}") from err


class _SparseRow:
    """A sparse row that multiplies a dense (features x folds) matrix: `row @ coef`."""

    __slots__ = ("indices", "values")

    def __init__(self, indices: Any, values: Any) -> None:
        self.indices = indices
        self.values = values

    def __matmul__(self, matrix: Any) -> Any:
        return self.values @ matrix[self.indices]


_lock = threading.Lock()


@functools.cache
def _load() -> ProfanityModel:
    try:
        from profanity_check import profanity_check as library
    except Exception as err:  # not cached: a failed load is retried on the next call
        raise ClassifierError(
            f"alt-profanity-check is not usable (install the 'safety' extra): {err!r}"
        ) from err
    return ProfanityModel(library.vectorizer, library.model, library.predict_prob)


def load() -> ProfanityModel:
    """The process-wide model, loaded on first use (~1.5 s: unpickling the vectoriser)."""
    with _lock:  # one load even when two threads ask at once
        return _load()


class LazyProfanity:
    """A `Scorer` that loads the shared model on first call, so building a screen is free
    and a load failure surfaces as a ClassifierError on a verdict, not at import."""

    def score(self, texts: Sequence[str]) -> list[float]:
        return load().score(texts)
