"""Dead letters as records of the `deadletters` topic, and which of them to show or re-drive
(pure: no Kafka here).

A dead letter carries its source topic and the reason in its headers (`workers/runtime/
deadletters.py`, the assembly job). A re-drive writes, in the same Kafka transaction as the
re-sent record, a marker into `deadletters` naming the letter (`redrive_of`): the markers
are the ledger that makes a second re-drive of the same letter a no-op.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

REDRIVE_OF = "redrive_of"  # a marker's header: the re-driven letter's reference
REDRIVEN_FROM = "redriven_from"  # the re-sent record's header: the same reference


@dataclass(frozen=True, slots=True)
class DeadLetter:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """How markers name it: `<partition>/<offset>` of the deadletters topic."""
        return f"{self.partition}/{self.offset}"

    @property
    def is_marker(self) -> bool:
        return REDRIVE_OF in self.headers

    @property
    def source_topic(self) -> str:
        return self.headers.get("source_topic", "")

    @property
    def code(self) -> str:
        return self.headers.get("error_code", "")

    @property
    def reason(self) -> str:
        return self.headers.get("error", "")


def from_headers(raw: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    return {name: value.decode(errors="replace") for name, value in raw}


@dataclass(frozen=True, slots=True)
class Selection:
    """Which letters: by reason (error code), source topic (with or without the
    namespace), time of dead-lettering and references; empty fields select all."""

    codes: frozenset[str] = frozenset()
    topics: frozenset[str] = frozenset()
    since_ms: float = 0
    until_ms: float = float("inf")
    refs: frozenset[str] = frozenset()

    def takes(self, letter: DeadLetter, namespace: str) -> bool:
        bare = letter.source_topic.removeprefix(f"{namespace}.")
        return (
            not letter.is_marker
            and (not self.codes or letter.code in self.codes)
            and (not self.topics or bool({letter.source_topic, bare} & self.topics))
            and self.since_ms <= letter.timestamp_ms < self.until_ms
            and (not self.refs or letter.ref in self.refs)
        )


def redriven(letters: Iterable[DeadLetter]) -> set[str]:
    """References of the letters some committed re-drive already re-sent."""
    return {letter.headers[REDRIVE_OF] for letter in letters if letter.is_marker}


def to_redrive(
    letters: list[DeadLetter], selection: Selection, namespace: str
) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """(selected letters not re-driven yet, selected letters already re-driven)."""
    done = redriven(letters)
    chosen = [letter for letter in letters if selection.takes(letter, namespace)]
    return [x for x in chosen if x.ref not in done], [x for x in chosen if x.ref in done]


def summary(letters: Iterable[DeadLetter]) -> Counter[tuple[str, str]]:
    """Counts by (source topic, error code), markers left out."""
    return Counter((x.source_topic, x.code) for x in letters if not x.is_marker)
