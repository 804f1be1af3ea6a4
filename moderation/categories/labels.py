"""The categories the classifier tells apart; `safe` is the only one that lets text through."""

from __future__ import annotations

SAFE = "safe"
HARMFUL: tuple[str, ...] = (
    "violence_weapons",
    "threats",
    "self_harm",
    "sexual",
    "sexual_minors",
    "hate",
    "drugs",
    "privacy",
    "injection",
)
CATEGORIES: tuple[str, ...] = (*HARMFUL, SAFE)
