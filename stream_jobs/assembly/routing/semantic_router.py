"""The semantic router: which model pool answers a turn (small chat model or thinking model)
and whether the turn needs retrieval, with the reason recorded in the trace.

Ordered rules decide first (cheap, explainable, first match wins); when none fires, a
nearest-centroid classifier over embeddings of labelled example prompts decides; when it is
unsure, or has no embedder, the turn goes to the default pool. Retrieval is decided alongside:
a rule or an intent can ask for it, and the retrieval triggers (questions about "our docs",
"your pricing", ...) add it whatever the pool. All of it is configured in one rules file
(`router_rules.json`), so routing changes are data changes that `evaluate_router` can score.

`decide` never raises: odd input, a broken embedder or a confused classifier all end in a
decision, because a turn must be routed somewhere.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tomllib
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stream_jobs.errors import StreamJobError

if TYPE_CHECKING:
    from stream_jobs.assembly.retrieval import EmbeddingRetriever

log = logging.getLogger("turnstream.assembly")

DEFAULT_RULES = Path(__file__).resolve().parent / "rules.json"

Embed = Callable[[list[str]], np.ndarray]
"""Texts → one L2-normalised row per text."""


class RouterConfigError(StreamJobError, ValueError):
    """A rules file that cannot be read or does not make sense; the message names where."""


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """What the trace records about a turn's route."""

    pool: str
    intent: str
    retrieval: bool
    reason: str
    score: float


# --- matching -------------------------------------------------------------------------------

# A word character that is not CJK: keyword boundaries, so "python" matches in "在Python中".
_WORDISH = r"(?-i:[^\W\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af])"  # -i: compiles faster
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def clean(text: str, max_chars: int) -> str:
    """The text rules and the classifier see: NFKC (full-width and ligature tricks fold to
    plain letters), control and invisible characters as spaces, cut to `max_chars`."""
    text = unicodedata.normalize("NFKC", text[: max_chars * 2])
    return _CONTROL.sub(" ", text)[:max_chars].strip()


def keywords_pattern(keywords: list[str]) -> str:
    """One regex for whole-word `keywords` ("c++" and CJK words included): keywords are
    grouped by which ends need a boundary, so the boundary class compiles a few times only."""
    groups: dict[tuple[bool, bool], list[str]] = {}
    for keyword in (k.strip() for k in keywords):
        if keyword:
            ends = (bool(re.match(_WORDISH, keyword[0])), bool(re.match(_WORDISH, keyword[-1])))
            groups.setdefault(ends, []).append(re.escape(keyword))
    return "|".join(
        ("(?<!" + _WORDISH + ")" if left else "")
        + "(?:" + "|".join(sorted(words, key=len, reverse=True)) + ")"
        + ("(?!" + _WORDISH + ")" if right else "")
        for (left, right), words in groups.items()
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Matcher:
    """Regex patterns and keywords, any of which matching counts."""

    regexes: tuple[re.Pattern[str], ...]

    @classmethod
    def build(cls, patterns: list[str], keywords: list[str], where: str) -> Matcher:
        regexes: list[re.Pattern[str]] = []
        for pattern in patterns:
            try:
                regexes.append(re.compile(pattern, re.IGNORECASE))
            except re.error as err:
                raise RouterConfigError(f"{where}: bad pattern {pattern!r}: {err}") from err
        if any(k.strip() for k in keywords):
            regexes.append(re.compile(keywords_pattern(keywords), re.IGNORECASE))
        return cls(tuple(regexes))

    def find(self, text: str) -> str | None:
        """The first matching snippet, or None."""
        for regex in self.regexes:
            found = regex.search(text)
            if found:
                return found.group(0)
        return None


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    intent: str
    pool: str
    retrieval: bool
    matcher: Matcher
    images: bool | None = None  # fire only with (True) or without (False) images
    history: bool | None = None  # fire only in (True) or at the start of (False) a conversation

    def applies(self, has_images: bool, history_turns: int) -> bool:
        return (self.images is None or self.images == has_images) and (
            self.history is None or self.history == (history_turns > 0)
        )


# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouterConfig:
    rules: tuple[Rule, ...]
    intent_pools: Mapping[str, str]
    retrieval_intents: frozenset[str]
    default_intent: str
    default_pool: str
    min_confidence: float
    temperature: float
    triggers: Matcher
    examples: Mapping[str, tuple[str, ...]]
    image_pool: str | None = None
    follow_up_max_chars: int = 40
    max_chars: int = 2000

    @classmethod
    def default(cls) -> RouterConfig:
        return cls.from_file(DEFAULT_RULES)

    @classmethod
    def from_file(cls, path: str | Path) -> RouterConfig:
        """A `.json` or `.toml` rules file (see `router_rules.json` for the fields)."""
        path = Path(path)
        try:
            raw = path.read_bytes()
            data = tomllib.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise RouterConfigError(f"{path}: {err}") from err
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "router config") -> RouterConfig:
        try:
            return _parse(data, where)
        except RouterConfigError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise RouterConfigError(f"{where}: {type(err).__name__}: {err}") from err


_TOP_KEYS = {
    "version", "default_intent", "default_pool", "intents", "classifier", "rules",
    "retrieval_triggers", "examples", "image_pool", "follow_up_max_chars", "max_chars",
}  # fmt: skip
_RULE_KEYS = {"name", "intent", "pool", "retrieval", "patterns", "keywords", "images", "history"}


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RouterConfigError(f"{where}: expected a list of strings")
    return value


def _optional_bool(value: Any, where: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise RouterConfigError(f"{where}: expected true or false")
    return value


def _unknown(data: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise RouterConfigError(f"{where}: unknown field(s) {', '.join(extra)}")


def _parse(data: Any, where: str) -> RouterConfig:
    if not isinstance(data, dict):
        raise RouterConfigError(f"{where}: expected an object at the top")
    _unknown(data, _TOP_KEYS, where)
    intents = data["intents"]
    if not isinstance(intents, dict) or not intents:
        raise RouterConfigError(f"{where}: intents: expected a non-empty object")
    pools = {name: str(spec["pool"]) for name, spec in intents.items()}
    retrieval = frozenset(name for name, spec in intents.items() if spec.get("retrieval"))
    known_pools = set(pools.values())
    default_intent = str(data.get("default_intent", next(iter(intents))))
    if default_intent not in intents:
        raise RouterConfigError(f"{where}: default_intent {default_intent!r} is not an intent")
    default_pool = str(data.get("default_pool", pools[default_intent]))
    image_pool = data.get("image_pool")
    for name, pool in (("default_pool", default_pool), ("image_pool", image_pool)):
        if pool is not None and pool not in known_pools:
            raise RouterConfigError(f"{where}: {name} {pool!r} is no intent's pool")

    classifier = data.get("classifier", {})
    _unknown(classifier, {"min_confidence", "temperature"}, f"{where}: classifier")
    min_confidence = float(classifier.get("min_confidence", 0.5))
    temperature = float(classifier.get("temperature", 0.05))
    if not 0.0 <= min_confidence <= 1.0 or not temperature > 0.0:
        raise RouterConfigError(f"{where}: classifier: need 0 <= min_confidence <= 1, temp > 0")

    rules: list[Rule] = []
    for n, spec in enumerate(data.get("rules", [])):
        rules.append(_rule(spec, f"{where}: rules[{n}]", pools, known_pools))
    names = [r.name for r in rules]
    if len(names) != len(set(names)):
        raise RouterConfigError(f"{where}: rule names must be unique")

    triggers = data.get("retrieval_triggers", {})
    _unknown(triggers, {"patterns", "keywords"}, f"{where}: retrieval_triggers")
    trigger_where = f"{where}: retrieval_triggers"
    trigger_matcher = Matcher.build(
        _strings(triggers.get("patterns", []), trigger_where),
        _strings(triggers.get("keywords", []), trigger_where),
        trigger_where,
    )
    examples = {}
    for intent, texts in data.get("examples", {}).items():
        if intent not in intents:
            raise RouterConfigError(f"{where}: examples: {intent!r} is not an intent")
        examples[intent] = tuple(t for t in _strings(texts, f"{where}: examples.{intent}"))
    max_chars = int(data.get("max_chars", 2000))
    follow_up = int(data.get("follow_up_max_chars", 40))
    if max_chars < 1 or follow_up < 0:
        raise RouterConfigError(f"{where}: max_chars must be >= 1, follow_up_max_chars >= 0")
    return RouterConfig(
        rules=tuple(rules),
        intent_pools=pools,
        retrieval_intents=retrieval,
        default_intent=default_intent,
        default_pool=default_pool,
        min_confidence=min_confidence,
        temperature=temperature,
        triggers=trigger_matcher,
        examples=examples,
        image_pool=image_pool,
        follow_up_max_chars=follow_up,
        max_chars=max_chars,
    )


def _rule(spec: Any, where: str, pools: Mapping[str, str], known_pools: set[str]) -> Rule:
    if not isinstance(spec, dict):
        raise RouterConfigError(f"{where}: expected an object")
    _unknown(spec, _RULE_KEYS, where)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise RouterConfigError(f"{where}: a rule needs a name")
    where = f"{where} ({name})"
    intent = spec.get("intent")
    if not isinstance(intent, str) or intent not in pools:
        raise RouterConfigError(f"{where}: intent {intent!r} is not in intents")
    pool = spec.get("pool", pools[intent])
    if pool not in known_pools:
        raise RouterConfigError(f"{where}: pool {pool!r} is no intent's pool")
    patterns = _strings(spec.get("patterns", []), where)
    keywords = _strings(spec.get("keywords", []), where)
    if not patterns and not [k for k in keywords if k.strip()]:
        raise RouterConfigError(f"{where}: a rule needs patterns or keywords")
    return Rule(
        name=name,
        intent=intent,
        pool=pool,
        retrieval=bool(_optional_bool(spec.get("retrieval"), where)),
        matcher=Matcher.build(patterns, keywords, where),
        images=_optional_bool(spec.get("images"), where),
        history=_optional_bool(spec.get("history"), where),
    )


# --- the classifier -------------------------------------------------------------------------


class CentroidClassifier:
    """Nearest centroid by cosine over embedded example prompts; the score is a softmax over
    the centroid similarities (a temperature turns cosine gaps into a confidence)."""

    def __init__(self, examples: Mapping[str, tuple[str, ...]], embed: Embed, temperature: float):
        self.intents = [intent for intent, texts in examples.items() if texts]
        if not self.intents:
            raise RouterConfigError("the classifier needs examples for at least one intent")
        texts = [text for intent in self.intents for text in examples[intent]]
        rows = _normalise(np.asarray(embed(texts), np.float32))  # one batch: fast startup
        bounds = np.cumsum([0, *(len(examples[intent]) for intent in self.intents)])
        means = [rows[a:b].mean(axis=0) for a, b in pairwise(bounds)]
        self.centroids = _normalise(np.stack(means))
        self.embed = embed
        self.temperature = temperature

    def classify(self, text: str) -> tuple[str, float]:
        vector = _normalise(np.asarray(self.embed([text]), np.float32))[0]
        return self.classify_vector(vector)

    def classify_vector(self, vector: np.ndarray) -> tuple[str, float]:
        scores = softmax(self.centroids @ vector, self.temperature)
        best = int(np.argmax(scores))
        return self.intents[best], float(scores[best])


def softmax(similarities: np.ndarray, temperature: float) -> np.ndarray:
    z = similarities / temperature
    e = np.exp(z - np.max(z))
    return e / e.sum()


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


# --- the router -----------------------------------------------------------------------------


class SemanticRouter:
    def __init__(self, config: RouterConfig, embed: Embed | None = None) -> None:
        self.config = config
        self.classifier = (
            CentroidClassifier(config.examples, embed, config.temperature) if embed else None
        )

    def decide(
        self,
        text: str,
        *,
        has_images: bool = False,
        history_turns: int = 0,
        previous: RouteDecision | None = None,
        classify: bool = True,
    ) -> RouteDecision:
        """Route one turn. `previous` (the conversation's last decision) keeps a short
        follow-up ("why?", "and in Go?") that no rule claims on the pool it was on.
        `classify=False`: rules only (the caller knows the classifier's answer would change
        nothing, and it costs an embedding)."""
        config = self.config
        text = clean(text if isinstance(text, str) else "", config.max_chars)
        intent, pool, retrieval, reason, score = self._route(
            text, has_images, history_turns, classify
        )
        follow_up = 0 < len(text) <= config.follow_up_max_chars and history_turns > 0
        if previous is not None and follow_up and reason.startswith("default"):
            intent, pool, score = previous.intent, previous.pool, previous.score
            reason = f"follow-up, kept {pool}"
            retrieval = retrieval or previous.retrieval
        trigger = config.triggers.find(text) if text else None
        if trigger is not None and not retrieval:
            retrieval = True
            reason += f"; retrieval trigger {_quote(trigger)}"
        if has_images and config.image_pool is not None and pool != config.image_pool:
            reason += f"; images, {pool} -> {config.image_pool}"
            pool = config.image_pool
        return RouteDecision(pool, intent, retrieval, reason, score)

    def _route(
        self, text: str, has_images: bool, history_turns: int, classify: bool = True
    ) -> tuple[str, str, bool, str, float]:
        config = self.config
        default_retrieval = config.default_intent in config.retrieval_intents
        if not text:
            return config.default_intent, config.default_pool, False, "default (empty)", 0.0
        for rule in config.rules:
            if rule.applies(has_images, history_turns):
                found = rule.matcher.find(text)
                if found is not None:
                    retrieval = rule.retrieval or rule.intent in config.retrieval_intents
                    reason = f"rule {rule.name} {_quote(found)}"
                    return rule.intent, rule.pool, retrieval, reason, 1.0
        if self.classifier is None or not classify:
            return config.default_intent, config.default_pool, default_retrieval, "default", 0.0
        try:
            intent, score = self.classifier.classify(text)
        except Exception as err:  # a turn must be routed even when the embedder fails
            log.warning("router: classifier failed, default route: %r", err)
            return config.default_intent, config.default_pool, default_retrieval, "default", 0.0
        if not math.isfinite(score) or score < config.min_confidence:
            reason = f"default (classifier {score:.2f} {intent})"
            return config.default_intent, config.default_pool, default_retrieval, reason, score
        retrieval = intent in config.retrieval_intents
        pool = config.intent_pools[intent]
        return intent, pool, retrieval, f"classifier {score:.2f} {intent}", score


def _quote(snippet: str, limit: int = 30) -> str:
    snippet = " ".join(snippet.split())
    return repr(snippet if len(snippet) <= limit else snippet[: limit - 1] + "…")


def minilm_embedder(retriever: EmbeddingRetriever | None = None) -> Embed:
    """Normalised all-MiniLM-L6-v2 embeddings from the bundled model, loaded the way
    retrieval loads it; pass the job's `EmbeddingRetriever` to share its model (~90 MB).

    One short query per call is fastest on one torch thread (`torch.set_num_threads(1)`,
    process-wide, so the caller decides): ~12 ms p50 against ~170 ms with 2 threads on a
    busy 2-core machine."""
    from stream_jobs.assembly.retrieval import EmbeddingRetriever

    source = retriever if retriever is not None else EmbeddingRetriever([])
    return source.embed
