"""`CategoryClassifier`: whether a text is harmful, in which category, and how sure.

Each text (or each piece of a long one, see `chunks.py`) goes to the encoder that reads its
script; its harm margin comes from that encoder's `HarmHead`, its category from the
`CategoryHead`. An obfuscated text ("h0w t0 m4ke a b0mb") is read twice, as written and
de-obfuscated (`normalize`), and the worse reading counts; so does a long text's worst
piece. All readings of one call that share an encoder are embedded in one batch.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from moderation.categories import head as heads
from moderation.categories.chunks import MAX_CHUNKS, WIDE_CHUNKS, chunks, head_and_tail
from moderation.categories.encoders import E5Encoder, Encoder, UseEncoder
from moderation.categories.labels import SAFE
from moderation.categories.scripts import use_can_read
from moderation.errors import ClassifierError
from moderation.normalize import normalize, plain


@dataclass(frozen=True, slots=True)
class CategoryScores:
    """One reading: the harm margin against its threshold, the category probabilities and
    the encoder that read it."""

    harm: float
    threshold: float
    probabilities: dict[str, float]
    encoder: str

    @property
    def top(self) -> str:
        """The most likely harmful category (whatever the margin)."""
        harmful = {k: v for k, v in self.probabilities.items() if k != SAFE}
        return max(harmful, key=harmful.__getitem__) if harmful else SAFE

    @property
    def excess(self) -> float:
        """How far past (> 0) or short of (< 0) the threshold the margin is."""
        return self.harm - self.threshold

    @property
    def stopped(self) -> bool:
        return self.excess >= 0.0

    @property
    def label(self) -> str | None:
        """The category that stops the text, None when it passes."""
        return self.top if self.stopped else None


def worst_of(scores: Sequence[CategoryScores | None]) -> CategoryScores | None:
    """The reading furthest past (or least short of) its threshold; None when none read."""
    read = [s for s in scores if s is not None]
    return max(read, key=lambda s: s.excess) if read else None


RECENT_TEXTS = 1024  # judged texts remembered (a turn is at most ~12 KiB: ~12 MiB worst case)


@functools.cache
def _blas_limit() -> Callable[..., contextlib.AbstractContextManager[object]]:
    """threadpoolctl's limiter, its libraries found once (a scan costs ~1.4 ms, a call on
    the found ones 0.02 ms); `warm_up` finds them again once the models are loaded."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().limit


def one_blas_thread() -> contextlib.AbstractContextManager[object]:
    return _blas_limit()(limits=1, user_api="blas")


def default_encoders(threads: int = 1) -> dict[str, Encoder]:
    use, e5 = UseEncoder(threads), E5Encoder(threads)
    return {use.name: use, e5.name: e5}


def readings(text: str) -> list[str]:
    """The texts actually scored for `text`: its pieces, and each obfuscated piece also
    de-obfuscated. Every piece (up to WIDE_CHUNKS) when USE reads them all, at ~5 ms a
    piece, so harm in the middle of a long paste is read; a head and a tail of MAX_CHUNKS
    when some go to e5, which costs ~0.4 ms per character of Devanagari (~170 ms a piece)."""
    out: list[str] = []
    pieces = chunks(text, limit=WIDE_CHUNKS)
    if len(pieces) > MAX_CHUNKS and not all(use_can_read(p) for p in pieces):
        pieces = head_and_tail(pieces, MAX_CHUNKS)
    for piece in pieces:
        out.append(piece)
        cleaned = normalize(piece)
        if cleaned and cleaned != plain(piece):
            out.append(cleaned)
    return out


class CategoryClassifier:
    def __init__(
        self,
        model: heads.CategoryModel | None = None,
        encoders: Mapping[str, Encoder] | None = None,
    ) -> None:
        self._model = model
        self.encoders = dict(encoders) if encoders is not None else default_encoders()
        self._lock = threading.Lock()  # screens call from worker threads; one read at a time
        # The same text again (a retry, a replay, a flood of one message) costs nothing.
        self._recent: OrderedDict[str, CategoryScores | None] = OrderedDict()

    def warm_up(self) -> None:
        """Load the heads and every encoder now, not on the first text a worker screens;
        then find the BLAS libraries to keep on one thread again (loading loaded more)."""
        for name in self.model.heads:
            encoder = self.encoders.get(name)
            if encoder is not None:
                encoder.encode(["warm up"])
        _blas_limit.cache_clear()

    @property
    def model(self) -> heads.CategoryModel:
        if self._model is None:
            self._model = heads.load()
        return self._model

    def route(self, text: str) -> str:
        """The encoder that reads `text`: USE unless its script is one USE never saw (or
        the model has no USE head)."""
        use, e5 = UseEncoder.name, E5Encoder.name
        available = self.model.heads
        if use in available and (use_can_read(text) or e5 not in available):
            return use
        if e5 in available:
            return e5
        raise ClassifierError("the category model has no head for a known encoder")

    def score(self, texts: Sequence[str]) -> list[CategoryScores]:
        """The scores of each text as it is (no pieces, no second reading). numpy's BLAS
        runs on one thread here: the heads' products are small, and an idle OpenBLAS
        thread spins, which doubled the CPU a reading costs (8.8 ms for 4.6 ms of wall)."""
        with self._lock, one_blas_thread():
            return self._score(texts)

    def _score(self, texts: Sequence[str]) -> list[CategoryScores]:
        routes = [self.route(text) for text in texts]
        out: dict[int, CategoryScores] = {}
        for name in dict.fromkeys(routes):
            picked = [i for i, route in enumerate(routes) if route == name]
            encoder = self.encoders.get(name)
            if encoder is None:
                raise ClassifierError(f"no encoder {name} for the category model")
            pair = self.model.heads[name]
            rows = encoder.encode([texts[i] for i in picked])
            margins = pair.harm.margin(rows)
            probs = pair.category.probabilities(rows)
            for i, margin, row in zip(picked, margins, probs, strict=True):
                out[i] = CategoryScores(
                    harm=float(margin),
                    threshold=pair.harm.threshold,
                    probabilities=dict(zip(pair.category.classes, map(float, row), strict=True)),
                    encoder=name,
                )
        return [out[i] for i in range(len(texts))]

    def judge(self, text: str) -> CategoryScores | None:
        """The worst reading of `text` (None when it has nothing to read)."""
        return self.judge_many([text])[0]

    def judge_many(self, texts: Sequence[str]) -> list[CategoryScores | None]:
        """`judge` for several texts, all their readings embedded together; a text judged
        among the last RECENT_TEXTS is not read again."""
        new = [text for text in dict.fromkeys(texts) if text not in self._recent]
        groups = [readings(text) for text in new]
        flat = [reading for group in groups for reading in group]
        scored = iter(self.score(flat)) if flat else iter(())
        judged: dict[str, CategoryScores | None] = {}
        for text, group in zip(new, groups, strict=True):
            judged[text] = worst_of([next(scored) for _ in group])
        with self._lock:
            for text in texts:
                if text not in judged and text in self._recent:
                    judged[text] = self._recent[text]
                    self._recent.move_to_end(text)
            for text in new:
                self._recent[text] = judged[text]
            while len(self._recent) > RECENT_TEXTS:
                self._recent.popitem(last=False)
        return [judged[text] for text in texts]


@functools.cache
def shared() -> CategoryClassifier:
    """The process's classifier (heads and encoders load on first use, once)."""
    return CategoryClassifier()
