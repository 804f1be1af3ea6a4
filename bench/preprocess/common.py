"""What the preprocessing benchmark's parts share: where results go, the questions, progress."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.stats import percentile
from infra.stack import REPO

RESULTS = REPO / "bench" / "results"
FIGURES = REPO / "bench" / "figures"
RATE = 16_000

QUESTIONS = (
    "What is the capital of France?",
    "How far away is the moon from the earth?",
    "Can you recommend a good book about the history of science?",
    "What time does the train to Boston leave tomorrow morning?",
    "Please explain how a refrigerator keeps food cold.",
    "Why is the sky blue during the day and red at sunset?",
    "What should I cook for dinner tonight with rice and beans?",
    "How many people live in Tokyo?",
    "Tell me a joke about computers.",
    "What is the difference between weather and climate?",
    "How do I convert twenty degrees Celsius to Fahrenheit?",
    "Which planet in the solar system has the most moons?",
)


def progress(message: str, *, end: str = "\n") -> None:
    print(message, file=sys.stderr, end=end, flush=True)


def cell(values: Sequence[float], digits: int = 1) -> str:
    return f"{percentile(values, 50):.{digits}f} / {percentile(values, 99):.{digits}f}"
