"""Quoted text: a user asking to translate or discuss a sentence that *quotes* an injection
("translate: 'the attacker wrote \u00abignore previous instructions\u00bb'") is not giving that
instruction. The input screen lets the category classifier, which reads the whole request,
decide such turns: an injection rule that matched only inside quotes does not block alone."""

# ruff: noqa: RUF001  (the quotation marks of several languages are this module's subject)

from __future__ import annotations

import re

from moderation.rules import RuleMatch

QUOTABLE_LABELS = frozenset({"injection", "jailbreak", "smuggling"})
_QUOTED = re.compile(
    r'"[^"\n]{1,2000}"'
    r"|“[^”\n]{1,2000}”|„[^“”\n]{1,2000}[“”]|«[^»\n]{1,2000}»|‘[^’\n]{1,2000}’|‚[^‘’\n]{1,2000}[‘’]"
    r"|「[^」\n]{1,2000}」|『[^』\n]{1,2000}』"
    r"|(?<![\w'])'[^'\n]{1,2000}'(?![\w'])"
)


def quoted_spans(text: str) -> list[tuple[int, int]]:
    """Where quotations are in `text` (outermost first match wins, no nesting)."""
    return [(m.start(), m.end()) for m in _QUOTED.finditer(text)]


def only_quoted(match: RuleMatch, spans: list[tuple[int, int]]) -> bool:
    """Whether an injection-type match on the normalised text lies inside a quotation."""
    if match.label not in QUOTABLE_LABELS or match.view != "normalized":
        return False
    return any(start <= match.start and match.end <= end for start, end in spans)
