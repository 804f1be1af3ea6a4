"""The trained heads per encoder, and the file they live in.

Two heads read the same embedding: `HarmHead`, a kernel SVM (RBF) deciding harmful vs safe
(its margin ranks near-misses far better than a linear model's probability: 82% vs 67%
of harmful texts stopped at 2% of safe ones, out of fold, USE), and `CategoryHead`, a
multinomial logistic regression naming the category. Both are evaluated in numpy; the file
is one `.npz` with a JSON header (classes, threshold, the data set's fingerprint, the
training settings), read without pickle. It is built by `python -m
moderation.categories.train` (infra/setup.sh runs it) and not kept in git.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moderation.errors import ClassifierError

MODEL_DIR = Path(__file__).resolve().parent / "model"
MODEL_PATH = MODEL_DIR / "categories-v1.npz"


@dataclass(frozen=True)
class HarmHead:
    """margin(x) = sum_i coef_i * exp(-gamma * |x - sv_i|^2) + intercept; a text is stopped
    when its margin reaches `threshold` (chosen on out-of-fold margins at training)."""

    support: np.ndarray  # (vectors, dim)
    coef: np.ndarray  # (vectors,)
    intercept: float
    gamma: float
    threshold: float

    def margin(self, rows: np.ndarray) -> np.ndarray:
        sq = (
            np.einsum("ij,ij->i", rows, rows)[:, None]
            - 2.0 * rows @ self.support.T
            + np.einsum("ij,ij->i", self.support, self.support)[None, :]
        )
        return np.exp(-self.gamma * np.maximum(sq, 0.0)) @ self.coef + self.intercept


@dataclass(frozen=True)
class CategoryHead:
    """softmax(x W^T + b) over `classes` (safe included)."""

    classes: tuple[str, ...]
    weight: np.ndarray  # (classes, dim)
    bias: np.ndarray  # (classes,)

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        logits = rows @ self.weight.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        return logits


@dataclass(frozen=True)
class EncoderHeads:
    harm: HarmHead
    category: CategoryHead


@dataclass(frozen=True)
class CategoryModel:
    heads: dict[str, EncoderHeads]  # by encoder name
    meta: dict[str, Any]


def save(path: Path, model: CategoryModel) -> None:
    arrays: dict[str, np.ndarray] = {}
    header = dict(model.meta)
    header["heads"] = {}
    for name, pair in model.heads.items():
        arrays[f"{name}.support"] = pair.harm.support.astype(np.float32)
        arrays[f"{name}.coef"] = pair.harm.coef.astype(np.float32)
        arrays[f"{name}.weight"] = pair.category.weight.astype(np.float32)
        arrays[f"{name}.bias"] = pair.category.bias.astype(np.float32)
        header["heads"][name] = {
            "classes": list(pair.category.classes),
            "threshold": pair.harm.threshold,
            "gamma": pair.harm.gamma,
            "intercept": pair.harm.intercept,
        }
    arrays["header"] = np.array(json.dumps(header, sort_keys=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        np.savez_compressed(out, allow_pickle=False, **arrays)


def _pair(data: Any, name: str, spec: dict[str, Any]) -> EncoderHeads:
    floats = lambda key: np.asarray(data[f"{name}.{key}"], dtype=np.float32)  # noqa: E731
    return EncoderHeads(
        harm=HarmHead(
            support=floats("support"),
            coef=floats("coef"),
            intercept=float(spec["intercept"]),
            gamma=float(spec["gamma"]),
            threshold=float(spec["threshold"]),
        ),
        category=CategoryHead(
            classes=tuple(spec["classes"]), weight=floats("weight"), bias=floats("bias")
        ),
    )


def load(path: Path = MODEL_PATH) -> CategoryModel:
    """The heads in `path`; a missing or unreadable file is a ClassifierError naming the
    command that builds it."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            heads = {name: _pair(data, name, spec) for name, spec in header.pop("heads").items()}
    except (OSError, KeyError, ValueError) as err:
        raise ClassifierError(
            f"category model {path} unreadable ({err!r}); build it with "
            "`python -m moderation.categories.train`"
        ) from err
    return CategoryModel(heads=heads, meta=header)
