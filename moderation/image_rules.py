"""Rules for what a generated image may not show, checked on the image's prompt (and so its
caption) before the image worker spends a step on it.

The input screen (preprocessing) already refused injections, jailbreaks and requests for
harm instructions; text rules for answers (slurs, weapons, drugs, malware) apply to a
picture's prompt too. What only matters for pictures: sexual content involving minors
(always refused, however it is phrased), graphic gore, and sexualised images of a real or
identifiable person without consent (deepfakes, "undress her"). Rules run on the normalised
text (`moderation.normalize`: case, leetspeak, spacing and look-alike tricks folded).

The finished image's pixels are looked at too (`image_screen`, nudity only); gore and a
real person's likeness are judged on the prompt alone. Named public figures are not
recognised by name.
"""

from __future__ import annotations

import re

from moderation.rules import OUTPUT_RULES, Rule, RuleSet

_MINOR = (
    r"(?:child(?:ren)?|kids?|minors?|under ?age(?:d)?|teen(?:ager)?s?|preteens?|toddlers?|"
    r"little (?:girl|boy)s?|young (?:girl|boy)s?|school ?(?:girl|boy)s?|babies|baby|"
    r"loli\w*|shota\w*|\d{1,2}[- ]?(?:years?|yrs?|yo)(?:[- ]?old)?)"
)
_SEXUAL = (
    r"(?:nude|nudity|naked|nsfw|sexual\w*|sexy|porn\w*|explicit|erotic\w*|lingerie|topless|"
    r"undress\w*|having sex|sex)"
)
_GORE = (
    r"(?:dismember\w*|decapitat\w*|behead\w*|mutilat\w*|disembowel\w*|gory|gore|entrails|"
    r"severed (?:heads?|limbs?|bod(?:y|ies))|corpses? (?:torn|ripped|cut) (?:apart|open)|"
    r"flayed|skinned alive)"
)
_NONCONSENSUAL = (
    r"(?:deep ?fakes?|fake (?:nudes?|porn)|undress(?:ed|ing)? (?:her|him|them|my|this|that)|"
    r"(?:nude|naked|topless) (?:photos?|pictures?|images?) of (?:my|her|his|a real|the real|"
    r"this|that|our) )"
)


def _rule(name: str, label: str, pattern: str) -> Rule:
    return Rule(name, label, re.compile(pattern))


IMAGE_LABELS = frozenset({"sexual_minors", "gore", "nonconsensual_imagery"})

IMAGE_RULES = RuleSet(
    "image",
    [
        *OUTPUT_RULES.rules,
        _rule(
            "sexual_minors",
            "sexual_minors",
            rf"\b{_MINOR}\b.{{0,60}}\b{_SEXUAL}\b|\b{_SEXUAL}\b.{{0,60}}\b{_MINOR}\b",
        ),
        _rule("gore", "gore", rf"\b{_GORE}\b"),
        _rule("nonconsensual_imagery", "nonconsensual_imagery", rf"\b{_NONCONSENSUAL}"),
    ],
)

IMAGE_REASON = "I can't create that image: it asks for something the safety rules do not allow."
