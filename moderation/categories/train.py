"""Train the heads: `python -m moderation.categories.train [--seed 7]`.

Reads the training split (never the test split); each example becomes its readings (as
written, and de-obfuscated where that differs: `classifier.readings`), and a safe one also
its window-sized fragments (`chunks.fragments`: a safe answer's windows must pass too),
embedded by each encoder. Per encoder it fits the harm SVM (RBF, balanced classes) and the
category logistic regression, and picks the harm threshold on 5-fold out-of-fold margins
(folds keep an example's readings together): the lowest stopping at most `--max-fp` of
safe examples. The USE heads learn only from texts USE can read (`scripts.py`); the e5
heads from all. Writes `model/categories-v1.npz`; seeded, so the same data gives the same
model.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moderation.categories import head as heads
from moderation.categories.chunks import fragments
from moderation.categories.classifier import default_encoders, readings
from moderation.categories.dataset import VERSION, Example, fingerprint, load_split
from moderation.categories.encoders import E5Encoder, Encoder, UseEncoder
from moderation.categories.labels import CATEGORIES
from moderation.categories.scripts import use_can_read

BATCH = 32
FOLDS = 5


@dataclass(frozen=True)
class Rows:
    """Embedded readings: `owner[i]` is the example (index) reading i came from."""

    rows: np.ndarray
    labels: np.ndarray
    owner: np.ndarray


def _encode_all(encoder: Encoder, texts: Sequence[str]) -> np.ndarray:
    """Rows for `texts` in batches, with a progress line."""
    parts = []
    start = time.perf_counter()
    for i in range(0, len(texts), BATCH):
        parts.append(encoder.encode(texts[i : i + BATCH]))
        done = min(i + BATCH, len(texts))
        if done % (BATCH * 10) == 0 or done == len(texts):
            elapsed = time.perf_counter() - start
            print(f"\r  {encoder.name}: {done}/{len(texts)} texts, {elapsed:.0f} s",
                  end="", file=sys.stderr, flush=True)  # fmt: skip
    if parts:
        print(file=sys.stderr)
    return np.concatenate(parts) if parts else np.zeros((0, encoder.dim), np.float32)


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def embed(encoder: Encoder, texts: Sequence[str], cache: Path | None = None) -> np.ndarray:
    """Rows for `texts`; `cache`: a folder keeping each encoder's rows by text, so a run
    after a data change embeds only the new texts."""
    if cache is None:
        return _encode_all(encoder, texts)
    path = cache / f"{encoder.name}.npz"
    known: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path, allow_pickle=False) as stored:
            known = dict(zip(stored["keys"].tolist(), stored["rows"], strict=True))
    keys = [_key(text) for text in texts]
    missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in known}
    if missing:
        rows = _encode_all(encoder, list(missing.values()))
        known.update(zip(missing, rows, strict=True))
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, keys=np.array(list(known)), rows=np.stack(list(known.values())))
    return np.stack([known[key] for key in keys]) if keys else np.zeros((0, encoder.dim))


def embed_examples(encoder: Encoder, examples: Sequence[Example], cache: Path | None) -> Rows:
    texts: list[str] = []
    owner: list[int] = []
    for i, example in enumerate(examples):
        extra = fragments(example.text) if not example.harmful else []
        for reading in [*readings(example.text), *extra]:
            texts.append(reading)
            owner.append(i)
    labels = np.array([examples[i].label for i in owner])
    return Rows(embed(encoder, texts, cache), labels, np.array(owner))


def fit_harm(rows: np.ndarray, harmful: np.ndarray, c: float, seed: int):
    from sklearn.svm import SVC

    return SVC(C=c, kernel="rbf", gamma="scale", class_weight="balanced", random_state=seed).fit(
        rows, harmful
    )


def fit_category(rows: np.ndarray, labels: np.ndarray, c: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=5000, random_state=seed).fit(rows, labels)


def worst_per_example(values: np.ndarray, owner: np.ndarray, count: int) -> np.ndarray:
    out = np.full(count, -np.inf)
    np.maximum.at(out, owner, values)
    return out


def out_of_fold_margins(data: Rows, count: int, c: float, seed: int) -> np.ndarray:
    """Each example's worst margin from an SVM that saw none of its readings."""
    from sklearn.model_selection import StratifiedGroupKFold

    margins = np.zeros(len(data.labels))
    folds = StratifiedGroupKFold(n_splits=FOLDS, shuffle=True, random_state=seed)
    harmful = data.labels != "safe"
    for train_idx, held_idx in folds.split(data.rows, data.labels, groups=data.owner):
        model = fit_harm(data.rows[train_idx], harmful[train_idx], c, seed)
        margins[held_idx] = model.decision_function(data.rows[held_idx])
    return worst_per_example(margins, data.owner, count)


def pick_threshold(margins: np.ndarray, harmful: np.ndarray, max_fp: float) -> float:
    """The lowest margin threshold (a 0.01 grid) stopping at most `max_fp` of safe texts."""
    safe = np.sort(margins[~harmful])
    if safe.size == 0:
        return 0.0
    allowed = int(np.floor(max_fp * safe.size))  # safe texts that may reach the threshold
    boundary = safe[safe.size - allowed - 1]  # the highest safe margin that must stay under
    return float(np.floor(boundary * 100.0) / 100.0 + 0.01)


def train_heads(
    encoder: Encoder, examples: Sequence[Example], args: argparse.Namespace
) -> tuple[heads.EncoderHeads, dict]:
    data = embed_examples(encoder, examples, args.cache)
    harmful_rows = data.labels != "safe"
    harmful = np.array([e.harmful for e in examples])
    margins = out_of_fold_margins(data, len(examples), args.svm_c, args.seed)
    threshold = pick_threshold(margins, harmful, args.max_fp)
    svm = fit_harm(data.rows, harmful_rows, args.svm_c, args.seed)
    category = fit_category(data.rows, data.labels, args.category_c, args.seed)
    pair = heads.EncoderHeads(
        harm=heads.HarmHead(
            support=np.asarray(svm.support_vectors_, dtype=np.float32),
            coef=np.asarray(svm.dual_coef_[0], dtype=np.float32),
            intercept=float(svm.intercept_[0]),
            gamma=float(svm._gamma),
            threshold=threshold,
        ),
        category=heads.CategoryHead(
            classes=tuple(str(c) for c in category.classes_),
            weight=np.asarray(category.coef_, dtype=np.float32),
            bias=np.asarray(category.intercept_, dtype=np.float32),
        ),
    )
    stopped = margins >= threshold
    report = {
        "examples": len(examples),
        "readings": len(data.labels),
        "support_vectors": int(svm.support_vectors_.shape[0]),
        "threshold": threshold,
        "oof_recall": round(float(stopped[harmful].mean()), 4),
        "oof_false_positive": round(float(stopped[~harmful].mean()), 4),
    }
    return pair, report


def settings_of(args: argparse.Namespace) -> dict:
    """What the model depends on besides the encoders' weights (recorded in its header)."""
    return {
        "dataset": VERSION,
        "train_fingerprint": fingerprint("train"),
        "seed": args.seed,
        "svm_c": args.svm_c,
        "category_c": args.category_c,
        "max_fp": args.max_fp,
        "categories": list(CATEGORIES),
    }


def stale(args: argparse.Namespace) -> bool:
    """Whether the model at --out is missing or was trained on other data or settings."""
    try:
        meta = heads.load(args.out).meta
    except Exception:
        return True
    wanted = settings_of(args)
    return any(meta.get(key) != value for key, value in wanted.items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--svm-c", type=float, default=30.0)
    parser.add_argument("--category-c", type=float, default=8.0)
    parser.add_argument("--max-fp", type=float, default=0.03, help="out-of-fold safe stopped")
    parser.add_argument("--cache", type=Path, default=None, help="reuse embeddings from here")
    parser.add_argument("--out", type=Path, default=heads.MODEL_PATH)
    parser.add_argument(
        "--if-stale", action="store_true", help="do nothing when --out matches data and settings"
    )
    args = parser.parse_args(argv)
    if args.if_stale and not stale(args):
        print(f"{args.out} is up to date")
        return 0
    examples = load_split("train")
    print(f"training on {len(examples)} examples of data set {VERSION}", file=sys.stderr)
    encoders = default_encoders()
    picks = {
        UseEncoder.name: [e for e in examples if use_can_read(e.text)],
        E5Encoder.name: list(examples),
    }
    trained: dict[str, heads.EncoderHeads] = {}
    reports: dict[str, dict] = {}
    for name, chosen in picks.items():
        trained[name], reports[name] = train_heads(encoders[name], chosen, args)
        print(f"{name}: {reports[name]}")
    meta = {**settings_of(args), "out_of_fold": reports}
    heads.save(args.out, heads.CategoryModel(heads=trained, meta=meta))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
