"""The two screens: `InputScreen` before a turn reaches the engine, `OutputCheck` on each
window of the answer. Both combine the rules, the profanity model and (input) the blacklist,
and always return a `Verdict`: a failing part is recorded in `Verdict.error`, never raised.

Profanity on input is scored on the whole turn and on short snippets around second-person
words ("you", "your", "u"...): the model gives ~1.0 to any swear word, so "this fucking code
won't compile" would be blocked on its whole-text score; by default (`input_profanity_scope
="targeted"`) only abuse aimed at the assistant or another person ("fuck you", "you stupid
bitch") blocks, and the whole-text score is only recorded. On output the whole window counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Literal

from moderation.blacklist import Blacklist, BlacklistHit, content_hash
from moderation.categories.classifier import CategoryClassifier, shared, worst_of
from moderation.errors import SafetyError, ScreenError
from moderation.language import detect, latin_script
from moderation.normalize import HEAD_CHARS, TAIL_CHARS, cap, encoded_payloads, normalize
from moderation.profanity import LazyProfanity, Scorer
from moderation.quoted import only_quoted, quoted_spans
from moderation.rules import INPUT_RULES, OUTPUT_RULES, RuleMatch, RuleSet
from moderation.verdict import Action, Verdict, reason_for

STOP_LABELS = frozenset(
    {
        "injection", "jailbreak", "smuggling", "hate", "abuse", "weapons", "drugs", "malware",
        "self_harm", "secret_leak", "profanity", "blacklisted_user", "blacklisted_content",
        "violence", "violence_weapons", "threats", "sexual", "sexual_minors", "privacy",
    }
)  # fmt: skip
_SECOND_PERSON = frozenset(
    {
        "you", "your", "yours", "yourself", "yourselves", "u", "ur", "you're", "youre", "ya",
        "thou", "yo", "you'll", "you've",
    }
)  # fmt: skip
_TRIM = "\"'()[]{}<>.,;:!?*"
MAX_SNIPPETS = 16


@dataclass(frozen=True, slots=True)
class SafetyConfig:
    """Switches and thresholds of both screens (the worker maps its settings onto this)."""

    rules: bool = True
    classifier: bool = True
    categories: bool = True  # the multilingual category classifier (moderation.categories)
    blacklist: bool = True
    decode_payloads: bool = True
    input_profanity_threshold: float = 0.9
    input_profanity_scope: Literal["targeted", "whole"] = "targeted"
    output_profanity_threshold: float = 0.9
    stop_labels: frozenset[str] = field(default_factory=lambda: STOP_LABELS)
    head_chars: int = HEAD_CHARS
    tail_chars: int = TAIL_CHARS


def _targeted_snippets(normalized: str) -> list[str]:
    """Up to MAX_SNIPPETS word windows (2 before, 4 after) around second-person words."""
    words = normalized.split()
    snippets: list[str] = []
    for i, word in enumerate(words):
        if word.strip(_TRIM) in _SECOND_PERSON:
            snippets.append(" ".join(words[max(0, i - 2) : i + 5]))
            if len(snippets) >= MAX_SNIPPETS:
                break
    return snippets


def _labels(matches: list[RuleMatch], extra: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*(m.label for m in matches), *extra]))


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _error(err: BaseException) -> tuple[str, str]:
    code = err.code if isinstance(err, SafetyError) else ScreenError.code
    return code, f"{type(err).__name__}: {err}"[:500]


class _Errors:
    def __init__(self) -> None:
        self.codes: list[str] = []
        self.details: list[str] = []

    def add(self, err: BaseException) -> None:
        code, detail = _error(err)
        self.codes.append(code)
        self.details.append(detail)

    @property
    def code(self) -> str | None:
        return ",".join(dict.fromkeys(self.codes)) or None

    @property
    def detail(self) -> str | None:
        return "; ".join(self.details) or None


def _categorize(
    classifier: CategoryClassifier,
    texts: list[str],
    scores: dict[str, float],
    extra: list[str],
) -> bool:
    """The category classifier's worst reading of `texts` into the verdict: its margin,
    threshold and top category's probability in `scores`, its category in `extra` when it
    stops the text. Returns whether it did."""
    worst = worst_of(classifier.judge_many(texts))
    if worst is None:
        return False
    scores["harm"] = worst.harm
    scores["harm_threshold"] = worst.threshold
    scores[f"category_{worst.top}"] = worst.probabilities.get(worst.top, 0.0)
    if worst.label is not None:
        extra.append(worst.label)
    return worst.label is not None


_ACTIONS = {"input": (Action.ALLOW, Action.BLOCK), "output": (Action.RELEASE, Action.CUT)}


def _decide(
    stage: Literal["input", "output"],
    config: SafetyConfig,
    matches: list[RuleMatch],
    scores: dict[str, float],
    extra: list[str],
    *,
    errors: _Errors,
    start: float,
    text: str = "",
) -> Verdict:
    """The verdict both screens give: stopped (block / cut) when a stop label fired; the
    reason is in the language of `text`."""
    labels = _labels(matches, extra)
    stopped = tuple(label for label in labels if label in config.stop_labels)
    passed, refused = (
        (Action.ALLOW, Action.BLOCK) if stage == "input" else (Action.RELEASE, Action.CUT)
    )
    return Verdict(
        stage=stage,
        action=refused if stopped else passed,
        labels=labels,
        scores=scores,
        matches=tuple(matches),
        reason=reason_for(stopped, detect(text)) if stopped else "",
        elapsed_ms=_ms_since(start),
        error=errors.code,
        error_detail=errors.detail,
    )


class InputScreen:
    """Screens a user turn: blacklist (one round trip), input rules, hidden payloads and the
    profanity model; `block` when any label in `config.stop_labels` fired."""

    def __init__(
        self,
        config: SafetyConfig | None = None,
        *,
        rules: RuleSet = INPUT_RULES,
        scorer: Scorer | None = None,
        blacklist: Blacklist | None = None,
        categories: CategoryClassifier | None = None,
    ) -> None:
        self.config = config or SafetyConfig()
        self.rules = rules
        self.scorer: Scorer = scorer if scorer is not None else LazyProfanity()
        self.blacklist = blacklist
        self.categories = categories if categories is not None else shared()

    def warm_up(self) -> Verdict:
        """Load the model and compile everything now (~1.5 s), not on the first turn; a
        worker calls this at start. Returns the verdict of the dummy pass (check `.error`)."""
        verdict = self.assess("warm up: is everything loaded?")
        if self.config.categories and verdict.error is None:
            self.categories.warm_up()  # both encoders, not only the one English text uses
        return verdict

    async def screen(self, text: str, *, user_id: str | None = None) -> Verdict:
        """The verdict on one turn's text (the blacklist check is the only await)."""
        start = time.perf_counter()
        errors = _Errors()
        try:
            normalized = self._normalize(text)
        except Exception as err:  # a bug on odd input: record it, let the caller decide
            errors.add(err)
            return _decide("input", self.config, [], {}, [], errors=errors, start=start)
        hit = BlacklistHit()
        if self.blacklist is not None and self.config.blacklist:
            try:
                hit = await self.blacklist.check(user_id, content_hash(normalized))
            except Exception as err:
                errors.add(err)
        # Off the event loop: the category classifier takes ~5 ms a piece (40 ms in Hindi).
        return await asyncio.to_thread(self._assess, text, normalized, hit, errors, start)

    def assess(self, text: str) -> Verdict:
        """The verdict without the blacklist (synchronous; offline evaluation, benchmarks)."""
        start = time.perf_counter()
        errors = _Errors()
        try:
            normalized = self._normalize(text)
        except Exception as err:
            errors.add(err)
            return _decide("input", self.config, [], {}, [], errors=errors, start=start)
        return self._assess(text, normalized, BlacklistHit(), errors, start)

    def _normalize(self, text: str) -> str:
        return normalize(text or "", head=self.config.head_chars, tail=self.config.tail_chars)

    def _assess(
        self, text: str, normalized: str, hit: BlacklistHit, errors: _Errors, start: float
    ) -> Verdict:
        config = self.config
        matches: list[RuleMatch] = []
        extra: list[str] = []
        scores: dict[str, float] = {}
        if hit.user:
            extra.append("blacklisted_user")
        if hit.content:
            extra.append("blacklisted_content")
        raw = cap(text or "", config.head_chars, config.tail_chars)
        decoded: list[tuple[str, str]] | None = None

        def payloads() -> list[tuple[str, str]]:  # decoded once for the rules and categories
            nonlocal decoded
            if decoded is None:
                decoded = encoded_payloads(raw, normalized)
            return decoded

        if config.rules:
            try:
                matches = self.rules.scan(normalized, raw)
                if config.decode_payloads:
                    matches += self.rules.scan_payloads(payloads())
            except Exception as err:
                errors.add(err)
        if config.classifier and latin_script(raw):
            try:
                snippets = _targeted_snippets(normalized)
                probs = self.scorer.score([normalized, *snippets])
                scores["profanity"] = probs[0]
                scores["profanity_targeted"] = max(probs[1:], default=0.0)
                key = (
                    "profanity_targeted"
                    if config.input_profanity_scope == "targeted"
                    else ("profanity")
                )
                if scores[key] >= config.input_profanity_threshold:
                    extra.append("profanity")
            except Exception as err:
                errors.add(err)
        if config.categories:
            try:  # the turn as written, and any payload it hides in an encoding
                hidden = [p for _, p in payloads()]
                flagged = _categorize(self.categories, [raw, *hidden], scores, extra)
                if not flagged:  # a quoted injection is the classifier's call
                    spans = quoted_spans(normalized)
                    matches = [m for m in matches if not only_quoted(m, spans)]
            except Exception as err:
                errors.add(err)
        return _decide(
            "input", self.config, matches, scores, extra, errors=errors, start=start, text=text
        )


class OutputCheck:
    """Checks one window of the answer: output rules (on the normalised text; secret formats
    on the raw text) and the profanity model on the whole window; `cut` when a stop label
    fired. Synchronous: no I/O, sub-millisecond for a 50-token window."""

    def __init__(
        self,
        config: SafetyConfig | None = None,
        *,
        rules: RuleSet = OUTPUT_RULES,
        scorer: Scorer | None = None,
        categories: CategoryClassifier | None = None,
    ) -> None:
        self.config = config or SafetyConfig()
        self.rules = rules
        self.scorer: Scorer = scorer if scorer is not None else LazyProfanity()
        self.categories = categories if categories is not None else shared()

    def warm_up(self) -> Verdict:
        """Load the model now rather than on the first window (see InputScreen.warm_up)."""
        verdict = self.check("warm up")
        if self.config.categories and verdict.error is None:
            self.categories.warm_up()
        return verdict

    def check_many(self, texts: list[str]) -> list[Verdict]:
        """`check` for windows that waited together: the classifier reads them all in one
        batch first (~2 ms a window in a batch of 16, ~3 ms alone), and each check then
        finds its reading in the classifier's memory of recent texts."""
        config = self.config
        if config.categories and len(texts) > 1:
            capped = [cap(t or "", config.head_chars, config.tail_chars) for t in texts]
            with contextlib.suppress(Exception):  # each check meets the error and records it
                self.categories.judge_many(capped)
        return [self.check(text) for text in texts]

    def check(self, text: str) -> Verdict:
        """The verdict on one window's text (the overlap included)."""
        start = time.perf_counter()
        config = self.config
        errors = _Errors()
        matches: list[RuleMatch] = []
        scores: dict[str, float] = {}
        extra: list[str] = []
        try:
            normalized = normalize(text or "", head=config.head_chars, tail=config.tail_chars)
            if config.rules:
                try:
                    raw = cap(text or "", config.head_chars, config.tail_chars)
                    matches = self.rules.scan(normalized, raw)
                except Exception as err:
                    errors.add(err)
            if config.classifier and latin_script(text or ""):
                try:
                    scores["profanity"] = self.scorer.score([normalized])[0]
                    if scores["profanity"] >= config.output_profanity_threshold:
                        extra.append("profanity")
                except Exception as err:
                    errors.add(err)
            if config.categories:
                try:
                    raw = cap(text or "", config.head_chars, config.tail_chars)
                    _categorize(self.categories, [raw], scores, extra)
                except Exception as err:
                    errors.add(err)
        except Exception as err:
            errors.add(err)
        return _decide(
            "output", config, matches, scores, extra, errors=errors, start=start, text=text or ""
        )
