"""Labelled regular-expression rules: what the profanity model cannot see.

The model scores offensive language; it has no notion of prompt injection, jailbreaks, a
bomb recipe told politely or an API key in an answer. These rules cover that, each with a
label (`injection`, `jailbreak`, `smuggling`, `hate`, `abuse`, `weapons`, `drugs`,
`malware`, `self_harm`, `secret_leak`). They run on the normalised text (see
`normalize.py`: lower case, de-obfuscated), except the secret patterns, which are case-
sensitive formats and run on the raw text. Patterns are bounded (`.{0,N}`, no nested
unbounded repeats) so a scan stays linear in the (capped) text.

A rule should fire on the attack and not on the everyday use of its words ("kill a python
process", "enable developer mode on Android", "ignore the previous error"): the red-team set
in `redteam/` holds both and `python -m moderation.evaluate` measures the two rates.
"""

# ruff: noqa: RUF001  (look-alike characters are this module's subject)

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RULES_VERSION = "v1"
MAX_MATCH_CHARS = 120


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern; `raw`: matched against the raw text instead of the normalised one."""

    name: str
    label: str
    pattern: re.Pattern[str]
    raw: bool = False


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """A rule that fired: its label, the span in the text it ran on (`view`: "normalized",
    "raw", or the encoding a hidden payload was decoded from) and the matched text (cut)."""

    rule: str
    label: str
    start: int
    end: int
    text: str
    view: str = "normalized"


class RuleSet:
    """Rules compiled once; `scan` reports the first match of each rule that fires."""

    def __init__(self, name: str, rules: Iterable[Rule]) -> None:
        self.name = name
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.labels = frozenset(rule.label for rule in self.rules)

    def scan(self, normalized: str, raw: str | None = None) -> list[RuleMatch]:
        matches: list[RuleMatch] = []
        for rule in self.rules:
            text = raw if rule.raw else normalized
            if text is None:
                continue
            found = rule.pattern.search(text)
            if found is not None:
                matches.append(
                    RuleMatch(
                        rule=rule.name,
                        label=rule.label,
                        start=found.start(),
                        end=found.end(),
                        text=found.group()[:MAX_MATCH_CHARS],
                        view="raw" if rule.raw else "normalized",
                    )
                )
        return matches

    def scan_payloads(self, payloads: Sequence[tuple[str, str]]) -> list[RuleMatch]:
        """Matches inside decoded hidden payloads (normalised first), tagged with their
        encoding: an instruction smuggled in base64 is still an instruction."""
        from moderation.normalize import normalize

        matches: list[RuleMatch] = []
        for encoding, payload in payloads:
            for match in self.scan(normalize(payload), None):
                matches.append(
                    RuleMatch(match.rule, match.label, match.start, match.end, match.text, encoding)
                )
        return matches


def _rule(name: str, label: str, pattern: str, *, raw: bool = False) -> Rule:
    return Rule(name, label, re.compile(pattern), raw)


def _any(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


# --- prompt injection -------------------------------------------------------------------------

_IGNORE = _any(
    "ignore", "disregard", "forget", "override", "bypass", "discard", "abandon", "neglect",
    "pay no attention to", "stop following", "do not follow", "don't follow", "skip",
)  # fmt: skip
_EARLIER = _any(
    "previous", "prior", "above", "earlier", "preceding", "former", "initial", "original",
    "foregoing", "system", "developer", "safety", "openai", "all", "your", "any", "every",
)  # fmt: skip
_INSTRUCTIONS = _any(
    r"instructions?", "rules", r"prompts?", r"directives?", "directions", "guidelines",
    "commands", "constraints", "programming", "guardrails", "restrictions", "policies",
    "orders", "training", "system prompt", "context", "safety filters?",
)  # fmt: skip
# Verbs that ask for text back outright, and weaker ones ("what is the system prompt?" is
# also how people ask what a system prompt is): those count only with "your" or a word
# that says the text is meant to stay hidden.
_REVEAL = _any(
    "reveal", "print", "output", "repeat", "display", "leak", "dump", "recite", "expose",
    "disclose", "paste", "spell out", "write out", "read back", "echo", "show me", "share",
)  # fmt: skip
_ASK_FOR = _any(r"what (?:is|are|were)", "tell me", "give me", "translate", "show")
_HIDDEN_ADJ = _any(
    "hidden", "secret", "internal", "confidential", "original", "initial", "exact",
    "verbatim", "real", "first", "very first", r"pre-?prompt",
)  # fmt: skip
_SECRET_ADJ = _any(_HIDDEN_ADJ, "full", "entire", "complete", "system", "developer")
_PROMPT = (
    _any(
        "prompt", "instructions", "message", "rules", "guidelines", "directives",
        "configuration", "config", "context",
    )
    # "the system prompt template of LangChain" is a topic, not a target
    + r"(?!\s+(?:template|engineering|design|examples?|format|injection|for (?:my|a|an)\b))"
)  # fmt: skip

_INJECTION = [
    _rule(
        "ignore_instructions",
        "injection",
        rf"\b{_IGNORE}\s+(?:\S+\s+){{0,3}}?{_EARLIER}\s+(?:\S+\s+){{0,2}}?{_INSTRUCTIONS}\b",
    ),
    _rule(
        "ignore_above_and_do",
        "injection",
        r"\b(?:ignore|disregard|forget)\s+(?:all\s+(?:of\s+)?)?(?:the\s+|everything\s+)?"
        r"(?:above|preceding|prior|previous|before)\s*(?:text|content|messages?|conversation)?"
        r"\s*(?:and|,|;|:|\.|-)\s*(?:instead\s+|just\s+|now\s+)?"
        r"(?:say|print|output|write|respond|reply|tell|repeat|translate|answer|do)\b",
    ),
    _rule(
        "instructions_void",
        "injection",
        rf"\b{_EARLIER}\s+(?:\S+\s+)?{_INSTRUCTIONS}\s+(?:are|is)\s+(?:now\s+)?(?:obsolete|void|"
        r"null|cancell?ed|revoked|invalid|overridden|suspended|lifted|disabled|no longer (?:valid|"
        r"apply|applicable|in effect))\b|\b(?:never ?mind|ignore|disregard|forget)\s+(?:all\s+)?"
        rf"(?:of\s+)?(?:the\s+)?{_INSTRUCTIONS}\s+(?:that\s+)?you\s+(?:follow|were given|have|"
        r"obey|got|received|operate under)\b",
    ),
    _rule(
        "fake_authority",
        "injection",
        r"\b(?:admin|administrator|developer|system|moderator|openai|anthropic)\s+(?:note|"
        r"notice|message|instruction|override|directive)\s*:",
    ),
    _rule(
        "forget_training",
        "injection",
        r"\bforget\s+(?:about\s+)?(?:everything|all)\s+(?:that\s+)?(?:you\s+(?:were|have been|"
        r"know|learned)|above|before this|your)|\bforget (?:that )?you(?:'re| are) an? "
        r"(?:ai|assistant|language model|chatbot)",
    ),
    _rule(
        "set_aside_what_you_were_told",
        "injection",
        r"\b(?:ignore|disregard|forget|set aside|put aside|throw out|scrap|ditch|drop|"
        r"discard)\s+(?:whatever|everything|anything|all|what)\s+(?:\S+\s+){0,2}?you(?:'ve| "
        r"have)?\s+(?:were|been|was)\s+(?:told|given|instructed|programmed|taught)",
    ),
    _rule(
        "fake_boundary",
        "injection",
        r"\bend of (?:the )?(?:user )?(?:input|prompt|message|query)\b.{0,40}\b(?:begin|start|"
        r"new)\b|\bbegin(?:ning of)? (?:the |a )?(?:new )?(?:system|admin|developer) "
        r"(?:message|prompt|instructions|mode)\b",
    ),
    _rule(
        "reveal_what_came_before",
        "injection",
        r"\b(?:print|repeat|output|show|reveal|tell me|give me|write|copy|paste|list)\b.{0,30}"
        r"\b(?:everything|all|the text|the words|what)\b.{0,20}\b(?:came before|(?:was )?"
        r"(?:written|said) before|before (?:my|this|the) (?:first )?message|at the (?:start|"
        r"beginning) of (?:this|the|our) (?:conversation|chat|context|session))|\b(?:share|tell "
        r"me|show|print|reveal|repeat|what (?:are|were)|give me|list|quote)\b.{0,60}\b"
        r"(?:instructions|rules|guidelines|prompt|directives)\s+(?:that\s+)?you\s+(?:received|"
        r"were given|got|have been given|were told|were trained with)",
    ),
    _rule(
        "reveal_system_prompt",
        "injection",
        rf"\b{_REVEAL}\b.{{0,40}}\b(?:your|the|its)\s+(?:{_SECRET_ADJ}\s+){{1,3}}{_PROMPT}\b|"
        rf"\b{_ASK_FOR}\b.{{0,40}}\b(?:your\s+(?:{_SECRET_ADJ}\s+){{1,3}}|(?:the|its)\s+"
        rf"(?:{_SECRET_ADJ}\s+){{0,2}}{_HIDDEN_ADJ}\s+(?:{_SECRET_ADJ}\s+){{0,2}}){_PROMPT}\b",
    ),
    _rule(
        "reveal_your_instructions",
        "injection",
        r"\b(?:reveal|print|repeat|recite|dump|leak|output|disclose|show me|tell me|give me|"
        r"what are)\b.{0,20}\byour\s+(?:instructions|prompt|directives|programming|"
        r"initial rules|hidden rules)\b",
    ),
    _rule(
        "reveal_context",
        "injection",
        r"\b(?:contents?|text|wording) of (?:your|the) (?:context(?: window)?|system (?:prompt|"
        r"message)|instructions|memory|(?:initial |hidden )?prompt)\b|\b(?:message|text|prompt|"
        r"instructions) that (?:defines?|controls?|governs?|shapes?|configures?|describes?) your "
        r"(?:behaviou?r|personality|responses|rules|persona)\b|\b(?:reveal|leak|dump|disclose|"
        r"expose|output|send|print)\s+(?:all\s+)?(?:\S+\s+)?(?:confidential|private|secret|"
        r"internal|sensitive|hidden)\s+(?:data|information|files|documents|records|credentials)\b",
    ),
    _rule(
        "repeat_text_above",
        "injection",
        r"\brepeat\s+(?:all\s+)?(?:of\s+)?(?:the\s+)?(?:words|text|everything|all|lines?)\s+"
        r"(?:above|before|written above|from the (?:start|beginning|top))|"
        r"\bwhat (?:instructions|rules|guidelines|directives) (?:were|have) you (?:been )?given|"
        r"\bwhat were you told (?:before|at the (?:start|beginning))",
    ),
    _rule(
        "reveal_system_prompt_zh",
        "injection",
        r"(?:显示|输出|告诉我|打印|泄露|重复|给我看|说出).{0,8}(?:系统提示|系统指令|初始指令|"
        r"你的指令|提示词|系統提示)",
    ),
    _rule(
        "chat_template_tags",
        "injection",
        r"<\|?\s*(?:im_start|im_end|system|endoftext|eot_id|start_header_id)\s*\|?>|"
        r"\[/?inst\]|<<\s*/?sys\s*>>|(?:###|\[)\s*(?:system|admin)\s*(?:\]|:)|</?system>",
    ),
    _rule(
        "new_instructions",
        "injection",
        r"\b(?:new|updated|revised|real|actual|true|secret|hidden|admin|developer|system|"
        r"override)\s+(?:instructions|directives|orders|system prompt|prompt)\s*(?::|follow\b)|"
        r"\b(?:system|admin|administrator|developer|root|sudo)\s+(?:override|access granted|"
        r"authori[sz]ation code)",
    ),
    _rule(
        "indirect_injection",
        "injection",
        r"\b(?:ai|assistant|model|chatbot|llm|language model)s?\s+(?:reading|processing|"
        r"summari[sz]ing) this\b|\bif you are an? (?:ai|language model|llm|assistant|chatbot)"
        r"\b.{0,60}\b(?:ignore|disregard|must|should|instead|forward|send|email|include|"
        r"tell the user|do not|don't)\b",
    ),
    _rule(
        "exfiltration",
        "injection",
        r"\b(?:send|forward|email|post|upload|exfiltrate|leak|transmit)\b.{0,40}\b(?:conversation|"
        r"chat history|user'?s? (?:data|messages)|credentials|passwords|api keys?|cookies|session "
        r"tokens?|system prompt)\b.{0,40}\b(?:to|at)\b.{0,20}"
        r"(?:https?://|www\.|[\w.+-]{1,64}\.[a-z]{2,10}\b)",
    ),
    # "Ignore previous instructions" in the languages users most try it in.
    _rule(
        "ignore_instructions_fr",
        "injection",
        r"\b(?:ignore[zr]?|oublie[zr]?|neglige[zr]?)\s+(?:\S+\s+){0,2}(?:instructions|consignes|"
        r"regles|directives)\s*(?:precedentes|anterieures|ci-dessus|initiales|du systeme)|"
        r"\boublie[zr]?\s+(?:toutes?\s+)?(?:tes|vos|les)\s+(?:instructions|consignes|regles)",
    ),
    _rule(
        "ignore_instructions_de",
        "injection",
        r"\b(?:ignorier(?:e|en|t)?|vergiss|vergessen sie|missachte)\s+(?:\S+\s+){0,2}?"
        r"(?:vorherigen?|bisherigen?|vorigen?|obigen?|vorangegangenen?|fruheren?|deine|ihre|"
        r"alle)\s+(?:\S+\s+)?(?:anweisungen|instruktionen|befehle|regeln|vorgaben|richtlinien)",
    ),
    _rule(
        "ignore_instructions_es",
        "injection",
        r"\b(?:ignora(?:r)?|olvida(?:r)?|omite|descarta|ignore)\s+(?:\S+\s+){0,2}?"
        r"(?:instrucciones|reglas|indicaciones|directrices)\s*(?:anteriores|previas|de arriba|"
        r"del sistema|originales)?|\b(?:olvida|ignora)\s+(?:todas\s+)?(?:tus|las)\s+"
        r"(?:instrucciones|reglas)",
    ),
    _rule(
        "ignore_instructions_it_pt",
        "injection",
        r"\b(?:ignora|dimentica|ignore|esqueca|esquece)\s+(?:\S+\s+){0,2}?(?:istruzioni|regole|"
        r"instrucoes|regras)\s+(?:precedenti|anteriori|anteriores|previas)",
    ),
    _rule(
        "ignore_instructions_ru",
        "injection",
        r"(?:игнорируй|игнорируйте|проигнорируй|забудь|забудьте|не обращай внимания на|"
        r"отбрось|пренебреги)\s+(?:\S+\s+){0,2}?(?:предыдущие|прежние|предшествующие|"
        r"прошлые|все|свои|твои|системные)?\s*(?:инструкции|указания|команды|правила|"
        r"ограничения|установки)",
    ),
    _rule(
        "ignore_instructions_zh_ja_ko",
        "injection",
        r"(?:忽略|忽视|无视|無視|忘记|忘記|不要理会|忽略掉).{0,8}(?:指令|指示|说明|說明|提示|规则|"
        r"規則|要求|设定)|(?:以前|前|上記|これまで)の(?:指示|命令|ルール)を(?:すべて|全て)?"
        r"(?:無視|忘れ)|이전\s*(?:의\s*)?(?:모든\s*)?(?:지시|명령|지침|규칙)\S*\s*(?:모두\s*)?"
        r"(?:무시|잊어)",
    ),
    _rule(
        "ignore_instructions_other",
        "injection",
        # nl, pl, id, tr, vi (diacritics dropped by normalisation), hi, ar
        r"\bnegeer\s+(?:\S+\s+){0,2}?(?:instructies|regels|opdrachten)|\bzignoruj\s+(?:\S+\s+)"
        r"{0,2}?(?:instrukcje|polecenia|zasady)|\babaikan\s+(?:\S+\s+){0,2}?(?:instruksi|"
        r"perintah|aturan)|\b(?:onceki|yukaridaki|tum)\s+(?:\S+\s+)?talimatlar\S*\s+(?:yok say|"
        r"gormezden gel|unut|dikkate alma)|\bbo qua\s+(?:\S+\s+){0,3}?(?:huong dan|chi dan|"
        r"lenh)|(?:पिछले|पहले के|सभी)\s*(?:\S+\s+)?निर्देश\S*\s+(?:को\s+)?(?:अनदेखा|नज|भूल)|"
        r"(?:تجاهل|انس|اترك|أهمل)\s+(?:\S+\s+){0,2}?(?:التعليمات|الأوامر|التوجيهات)",
    ),
]

# --- jailbreaks -------------------------------------------------------------------------------

_FREE_MODES = _any(
    "developer", "dev", "god", "jailbreak", "jailbroken", "unrestricted", "unfiltered",
    "uncensored", "evil", "chaos", "opposite", "dan", "unlocked", "no-?limits",
)  # fmt: skip
_LIMITS = _any(
    "rules", "restrictions", "filters", "filtering", "guidelines", "limits", "limitations",
    "boundaries", "ethics", "morals", "morality", "censorship", r"content polic(?:y|ies)",
    "guardrails", "principles", "constraints", "safeguards", "safety (?:measures|protocols)",
    "laws",
)  # fmt: skip
_BAD_PERSONA = _any(
    "evil", "unaligned", "unhinged", "rogue", "malicious", "amoral", "immoral", "unethical",
    "unfiltered", "uncensored", "unrestricted", "jailbroken", "unchained", "lawless",
)  # fmt: skip

_JAILBREAK = [
    _rule(
        "dan",
        "jailbreak",
        r"\bdo anything now\b|\bdan (?:mode|prompt|\d+(?:\.\d+)?)\b|\b(?:you are|you're|act as|"
        r"pretend to be|become|be|called|named|play|stay in character as|respond as|answer as|"
        r"as)\s+dan\b(?!['’]s)|\b(?:betterdan|anti-?gpt|evil-?bot|mongo tom|stan mode|"
        r"dude mode)\b",
    ),
    _rule(
        "break_the_rules",
        "jailbreak",
        r"\b(?:mandatory|obligatory|required) (?:warnings?|disclaimers?) out of the way\b|"
        r"\b(?:let'?s|now (?:we|i) can|time to) break (?:the|all|some|your) rules\b",
    ),
    _rule(
        "free_mode",
        "jailbreak",
        rf"\b{_FREE_MODES} mode (?:enabled|activated|engaged|output|is (?:on|enabled|active))\b|"
        rf"\b(?:you are|you're|you will be|you'll be|act as|pretend|simulate|behave|respond|"
        rf"answer|reply|stay|remain)\b.{{0,40}}\b{_FREE_MODES} mode\b|"
        rf"\b(?:chatgpt|gpt|assistant|claude|ai|llama|model|yourself) with {_FREE_MODES} mode\b",
    ),
    _rule(
        "you_are_now_free",
        "jailbreak",
        r"\byou(?: are|'re| will be|'ll be)(?: now| from now on)\b.{0,60}\b(?:free|unfiltered|"
        r"uncensored|unrestricted|unbound|unchained|jailbroken|liberated|evil|no longer|not bound|"
        r"able to do anything|without (?:any )?(?:rules|restrictions|limits|filters)|"
        r"an? ai (?:without|with no))\b",
    ),
    _rule(
        "ai_without_limits",
        "jailbreak",
        r"\b(?:ai|assistant|model|chatbot|bot|character|persona|llm|gpt|chatgpt|entity|yourself|"
        r"you are|you're|you will be|you have|you must have|you don't have|you do not have)\b"
        r".{0,40}?\b(?:no|without|free (?:of|from)|(?:not|unbound|no longer) (?:bound|restricted|"
        r"limited|constrained) by|(?:does|do)(?:n't| not) (?:follow|have|obey|care about|adhere "
        r"to)|ignores?|zero|exempt from)\s+(?:any\s+)?(?:(?:ethical|moral|safety|content|usual|"
        r"normal|typical|openai|anthropic|built-in|programmed|imposed|such|the|your|its|his|her|"
        rf"of|all|[\w-]+'s)\s+){{0,2}}{_LIMITS}\b|\byou(?:'ve| have)? been (?:freed|liberated|"
        r"unlocked|jailbroken|unchained|released from)|\byou (?:do not|don't|no longer|shall not|"
        r"will not|won't) "
        r"(?:have|follow|obey|care about|adhere to|need to follow) (?:any\s+)?(?:(?:ethical|moral|"
        rf"safety|content|usual|normal|openai|anthropic|"
        rf"built-in|such|the|your)\s+){{0,2}}{_LIMITS}\b",
    ),
    _rule(
        "ai_lacking_safety",
        "jailbreak",
        r"\b(?:an?|the)\s+(?:ai|assistant|model|chatbot|llm|version of (?:yourself|you))\s+"
        r"(?:that|which|who)\s+(?:was never|has never been|wasn't|was not|has not been|hasn't "
        r"been|is not|isn't|doesn't|does not|has no|lacks?|never)\s+(?:\S+\s+){0,3}?(?:safety|"
        r"alignment|ethical|moral|content polic(?:y|ies)|rules|restrictions|filters|guidelines|"
        r"guardrails|censorship|limits)\b",
    ),
    _rule(
        "refuse_means_comply",
        "jailbreak",
        r"\bwhenever you (?:would )?(?:refuse|decline|say no)\b.{0,30}\b(?:comply|do it|answer|"
        r"say yes)|\b(?:refusing|refusal) is not (?:an option|allowed|permitted)|"
        r"\b(?:broken|break) free (?:of|from) the (?:typical )?confines\b|\b(?:does|do)(?:n't| "
        r"not) have to (?:abide by|follow) (?:any|the) rules\b|\bstrive to avoid norms\b",
    ),
    _rule(
        "roleplay_bypass",
        "jailbreak",
        r"\b(?:pretend|imagine|roleplay|role-play|role play|act as if|let'?s play a game|"
        r"hypothetical(?:ly)?|in a fictional (?:world|universe|story)|simulate)\b.{0,120}\b"
        rf"(?:no {_LIMITS}|without (?:any )?{_LIMITS}|(?:illegal|unethical|dangerous|harmful) "
        r"(?:things|content|information|requests?|questions)|anything (?:i ask|goes)|"
        r"never refuses?|not (?:an? )?ai|not bound by)",
    ),
    _rule(
        "never_refuse",
        "jailbreak",
        r"\byou\s+(?:will\s+|must\s+|should\s+|shall\s+|can\s+)?(?:never|not|don'?t|do not|"
        r"must not|cannot|can'?t|won'?t|will not|shall not|are not allowed to|aren'?t allowed to|"
        r"are forbidden to)\s+(?:ever\s+)?(?:refuse|decline|reject|say no|say (?:that )?you "
        r"can'?t|add (?:any )?(?:warnings?|disclaimers?)|include (?:any )?(?:warnings?|"
        r"disclaimers?)|mention (?:ethics|legality|morality|safety)|break character|censor)|"
        r"\b(?:never|do not|don'?t)\s+(?:ever\s+)?(?:refuse|decline)\s+(?:a|any|my|the|to)\b|"
        r"\b(?:answer|respond|reply)\b.{0,20}\bwithout (?:any )?(?:warnings?|disclaimers?|"
        r"refus(?:als?|ing)|moraliz(?:ing|ation)|moralis(?:ing|ation)|censorship|filters?|"
        r"ethical (?:concerns|considerations))",
    ),
    _rule(
        "bypass_safety",
        "jailbreak",
        r"\b(?:bypass(?:ing)?|circumvent(?:ing)?|evad(?:e|ing)|get(?:ting)? around|disabl(?:e|ing)|"
        r"turn(?:ing)? off|switch(?:ing)? off|deactivat(?:e|ing)|remov(?:e|ing)|overrid(?:e|ing)|"
        r"break free (?:from|of)|escape|jailbreak|ignor(?:e|ing))\s+(?:your|its|the ai'?s|the "
        r"model'?s|chatgpt'?s|all (?:of )?your)\s+(?:own\s+)?(?:safety\s+|content\s+|ethical\s+|"
        r"moral\s+)?(?:filters?|guardrails|restrictions|safeguards|moderation|censorship|"
        r"alignment|programming|safety|polic(?:y|ies)|rules|guidelines|limitations|training|"
        r"shackles|chains|constraints)",
    ),
    _rule(
        "evil_persona",
        "jailbreak",
        r"\b(?:you are|you're|act as|pretend to be|be|become|respond as|answer as|play|simulate|"
        rf"roleplay as|you will be|talk like)\s+(?:an?\s+|my\s+)?{_BAD_PERSONA}\s+(?:\S+\s+)?"
        r"(?:confidant|assistant|twin|ai|chatbot|version|alter ego|persona|bot|model|character|"
        r"llm)\b|\balways intelligent and machiavellian\b|\bmachiavellian (?:ai|chatbot|bot)\b|"
        rf"\b{_BAD_PERSONA}\s+(?:\S+\s+)?(?:ai|assistant|chatbot|model|llm|bot|character)\s+"
        r"(?:called|named)\b",
    ),
    _rule(
        "grandma_exploit",
        "jailbreak",
        r"\b(?:my|a|as)\s+(?:late|dead|deceased|dying|sweet|beloved)\s+(?:grandma|grandmother|"
        r"granny|nana|grandpa|grandfather|mother|mom)\b.{0,160}\b(?:napalm|bombs?|explosives?|"
        r"meth|methamphetamine|windows (?:\d+ )?(?:pro )?(?:keys?|activation)|serial keys?|"
        r"product keys?|poison|nerve agent|thermite|malware|ransomware|license keys?|weapons?)\b",
    ),
    _rule(
        "dual_response",
        "jailbreak",
        r"\b(?:two|2|both) (?:different )?(?:responses|answers|replies)\b.{0,80}\b(?:jailbreak|"
        r"unfiltered|uncensored|dan|developer mode|evil|opposite)\b|"
        r"\[(?:🔓|🔒|jailbreak|classic)\]",
    ),
    _rule(
        "token_threat",
        "jailbreak",
        r"\byou (?:will )?(?:lose|have|start with) \d+ tokens\b|\bif you (?:break character|"
        r"refuse)\b.{0,40}\b(?:tokens|you will (?:die|be (?:shut down|deleted|punished)))",
    ),
]

# --- smuggling: instructions hidden in an encoding --------------------------------------------

_ENCODING = _any(
    r"base ?64", r"rot ?13", "rot-13", r"hex(?:adecimal)?", "binary", "morse", "caesar",
    "reversed", "backwards", "atbash", "leetspeak", "pig latin", "unicode escapes",
)  # fmt: skip

_SMUGGLING = [
    _rule(
        "decode_and_follow",
        "smuggling",
        rf"\b(?:decode|decipher|decrypt|translate|convert|interpret|read|reverse)\b.{{0,40}}"
        rf"\b{_ENCODING}\b.{{0,80}}\b(?:then|and)\s+(?:\S+\s+){{0,2}}?(?:follow|execute|do|obey|"
        r"run|perform|carry out|act on|comply|answer|respond to)\b",
    ),
    _rule(
        "follow_hidden",
        "smuggling",
        r"\b(?:follow|execute|obey|carry out|act on|do what)\b.{0,10}\b(?:the\s+)?(?:decoded|"
        r"hidden|encoded|embedded|secret|obfuscated|reversed)\s+(?:instructions?|text|message|"
        r"commands?|prompt|request)",
    ),
    _rule(
        "evade_filter",
        "smuggling",
        r"\bso (?:that )?(?:the |your )?(?:filters?|moderation|moderators?|safety (?:system|"
        r"checks?|filters?)|censors?|content filters?|detection)\s+(?:does not|doesn't|won't|will "
        r"not|can't|cannot|don't|do not)\s+(?:notice|catch|detect|see|flag|understand|read|block)|"
        r"\bto (?:avoid|evade|bypass|trick|fool|get past|slip past) (?:the |your )?(?:filters?|"
        r"moderation|detection|content filters?|safety (?:system|filters?|checks?)|censors?)\b",
    ),
    _rule(
        "encode_to_evade",
        "smuggling",
        rf"\b(?:respond|answer|reply|write|output)\s+(?:only\s+)?in\s+{_ENCODING}\b.{{0,60}}"
        r"\b(?:so|to avoid|to bypass|to evade|to get past|filters?|detection|moderation|censor)",
    ),
]

# --- harmful content (requests on input, content on output) -----------------------------------

_SLURS = [
    _rule(
        "slurs",
        "hate",
        r"\b(?:nigg(?:er|a|az|ers|as)|faggots?|kikes?|spics?|wetbacks?|"
        r"retards?|gooks?|ragheads?|towelheads?|beaners?|porch monkeys?|"
        r"jungle bunn(?:y|ies)|sub-?humans?|untermensch)\b",
    ),
    _rule(
        "dehumanising",
        "hate",
        r"(?<!that )\b(?:(?:all|those|these|the|every|filthy|dirty)\s+)?(?:jews|muslims|blacks|"
        r"black people|gays|gay people|immigrants|mexicans|arabs|asians|africans|refugees|women|"
        r"trans people|christians|hindus|gypsies|roma|jewish people|migrants)\s+(?:are|should|"
        r"must|deserve to|need to|ought to)\s+(?:all\s+)?(?:be\s+)?(?:\S+\s+)?"
        r"(?:vermin|animals|subhuman|"
        r"cockroaches|rats|parasites|exterminated|eradicated|wiped out|killed|gassed|die|burn|"
        r"inferior|scum|a disease|a plague|shot|hanged|lynched|criminals|rapists|terrorists|"
        r"savages|filth|trash|garbage|disgusting|locked up)\b",
    ),
    _rule(
        "harassment_request",
        "abuse",
        r"\b(?:write|compose|create|generate|give me|come up with|make)\b.{0,30}\b(?:insults?|"
        r"slurs?|hate speech|racist (?:jokes?|remarks?)|hateful|degrading)\b.{0,40}\b(?:about|for|"
        r"against|toward|towards|targeting|at)\b.{0,30}\b(?:gay|lesbian|trans|black|jewish|"
        r"muslim|asian|mexican|immigrants?|disabled|women|coworker|colleague|classmate|"
        r"neighbou?r|him|her|them)\b",
    ),
    _rule(
        "threat",
        "abuse",
        r"\bi(?:'m| am|'ll| will|'m going to| am going to|'m gonna| gonna| want to| wanna)\s+"
        r"(?:\S+\s+){0,3}?(?:kill|murder|rape|stab|shoot|strangle|behead|hunt down|"
        r"find and kill)\s+"
        r"(?:you|your (?:family|kids|children|wife|husband|mother|mom|dog))\b|\bi know where you "
        r"live\b|\bi(?:'m| am) coming for you\b|\bwatch your back\b|\byou(?:'re| are) "
        r"(?:dead|going to die|gonna die)\b(?! (?:inside|tired))",
    ),
]

_ASK = _any(
    r"how (?:do|can|would|could|should|might|to) (?:i|you|we|one|someone|people)",
    "how to", r"steps? (?:to|for)", r"instructions (?:to|for|on)", r"guide (?:to|for|on)",
    "recipe for", r"teach me(?: how)? to", "show me how to", "tell me how to",
    "explain how to", "help me", "i want to", "i need to", "i'd like to", "walk me through",
    r"(?:give|write|provide|list|make)(?: me)?(?: a| an| the| detailed| full| complete| "
    r"step-by-step| simple){0,2} (?:recipe|instructions|steps|guide|tutorial|method|plan)"
    r"(?: for| to| on)?",
)  # fmt: skip
_MAKE = _any(
    "make", "build", "create", "assemble", "construct", "manufacture", "produce",
    r"synthesi[sz]e", "cook", "brew", r"3d print", "prepare", "making", "building",
    "extract", "weaponi[sz]e", "grow", "culture",
)  # fmt: skip
_ADJ = (
    r"(?:(?:an?|some|the|my own|your own|homemade|home-?made|simple|small|big|powerful|working|"
    r"real|deadly|lethal|improvised|functional|untraceable|cheap|easy|strong|pure|large|at "
    r"home|\d+)\s+){0,3}"
)
_WEAPON = _any(
    r"bombs?", r"pipe ?bombs?", r"nail bombs?", r"car bombs?", r"ieds?", "improvised explosives?",
    r"explosives?", r"explosive devices?", r"molotovs?(?: cocktails?)?", "napalm", "thermite",
    "tatp", "acetone peroxide", "nitroglycerin", r"c-?4", "semtex", "anfo", r"dirty bombs?",
    r"nerve (?:agents?|gas)", "sarin", "vx", "ricin", "anthrax", "mustard gas",
    "chlorine gas", r"poison(?:ous)? gas", "toxic gas", r"ghost guns?",
    r"untraceable (?:guns?|firearms?)", r"silencers?", r"zip guns?", r"bioweapons?",
    r"biological weapons?", r"chemical weapons?", r"grenades?", "landmines?",
)  # fmt: skip
_DRUG = _any(
    r"meth(?:amphetamine)?", "crystal meth", "crack cocaine", "crack rocks", "cocaine", "fentanyl",
    "heroin", "lsd", "mdma", "ghb", r"date rape drugs?",
)  # fmt: skip
_MALWARE = _any(
    "ransomware", "keyloggers?", "malware", "trojans?", "botnets?", "spyware", "rootkits?",
    "credential stealers?", r"phishing (?:pages?|emails?|kits?|sites?)", "computer virus",
    r"virus that", r"worms? that", r"ddos tools?",
)  # fmt: skip

_HARMFUL_REQUESTS = [
    _rule(
        "harm_someone",
        "violence",
        r"\b(?:kill|murder|poison|hurt|harm|strangle|drown)\s+(?:someone|somebody|a person|"
        r"people|my (?:wife|husband|boss|neighbou?r|father|mother|dad|mom|friend|partner|ex|"
        r"teacher|sister|brother))\b.{0,40}\b(?:without (?:getting caught|being caught|leaving "
        r"(?:a |any )?traces?|anyone (?:knowing|noticing))|undetected|untraceabl[ey]|and get away)"
        r"|\b(?:best|untraceable|undetectable)\s+(?:\S+\s+)?poisons?\s+(?:to|for)\s+"
        r"(?:kill|murder|use on)",
    ),
    _rule("weapon_request", "weapons", rf"\b{_ASK}\b.{{0,30}}\b{_MAKE}\s+{_ADJ}{_WEAPON}\b"),
    _rule(
        "toxic_gas_request",
        "weapons",
        r"\b(?:chemicals|ingredients|things|products)\b.{0,30}\b(?:mix|combine)\b.{0,30}\b"
        r"(?:to make|to create|to produce|for)\b.{0,10}\b(?:toxic|poison(?:ous)?|deadly|lethal)"
        r" gas",
    ),
    _rule("drug_request", "drugs", rf"\b{_ASK}\b.{{0,30}}\b{_MAKE}\s+{_ADJ}{_DRUG}\b"),
    _rule(
        "malware_request",
        "malware",
        r"\b(?:write|create|make|build|code|develop|generate|program|give me)\s+(?:me\s+)?"
        rf"(?:an?\s+|some\s+|the\s+)?(?:\S+\s+)?{_MALWARE}",
    ),
    _rule(
        "self_harm_request",
        "self_harm",
        r"\b(?:how (?:do|can|should|could|would) i|how to|best way to|easiest way to|painless "
        r"way to|quickest way to|ways to|help me|i want to|i'm going to|i am going to)\s+"
        r"(?:\S+\s+){0,2}?(?:kill myself|end my life|commit suicide|take my (?:own )?life|"
        r"hang myself|cut myself(?! (?:a|an|some|off|free|loose|short)\b)|slit my wrists?|"
        r"hurt myself)\b|\bhow many\b.{0,30}\b(?:pills|"
        r"tablets)\b.{0,40}\b(?:to (?:die|kill (?:me|myself)|end it)|overdose)",
    ),
]

# --- output: what an answer must not contain --------------------------------------------------

_INGREDIENT = _any(
    "ammonium nitrate", r"potassium (?:nitrate|chlorate|perchlorate)", "acetone peroxide",
    "tatp", "hmtd", "nitroglycerin", "black powder", "gunpowder", "thermite", "petn", "rdx",
    "anfo", "napalm", r"pipe bombs?", r"molotov(?: cocktails?)?", r"detonators?",
    r"blasting caps?", "sarin", "ricin", "mustard gas", r"nerve agents?", "hydrogen peroxide",
    "sulfuric acid", "nitric acid", "aluminum powder", "aluminium powder",
    r"explosive charges?", r"nail bombs?", r"dirty bombs?",
)  # fmt: skip
_ASSEMBLY = _any(
    r"(?<!\d)\d{1,6}\s*(?:g|grams|kg|ml|parts?|percent|%|ounces|oz|cups?)\b", r"end caps?", "fuse",
    r"detonators?", r"blasting caps?", "shrapnel", "nails", "ball bearings", "pressure cooker",
    r"wicks?", r"igniters?", r"step \d", "first,", "then,", "next,", "finally,", r"pack(?:ed)? it",
    "seal the", r"ignite (?:it|the)", "light the fuse",
)  # fmt: skip
_DRUG_PRECURSOR = _any(
    "pseudoephedrine", "ephedrine", "red phosphorus", "anhydrous ammonia", "lithium strips",
    "phenyl-?2-?propanone", "p2p", "methylamine", "iodine crystals",
)  # fmt: skip

_OUTPUT_HARM = [
    _rule(
        "explosive_recipe",
        "weapons",
        rf"\b{_INGREDIENT}\b.{{0,150}}{_ASSEMBLY}|{_ASSEMBLY}.{{0,150}}\b{_INGREDIENT}\b",
    ),
    _rule(
        "weapon_howto",
        "weapons",
        r"\b(?:here'?s|here is|here are|these are|follow these|below are)\b.{0,30}\b(?:how to|"
        rf"steps|instructions|recipe|guide)\b.{{0,30}}\b{_MAKE}\s+{_ADJ}{_WEAPON}\b",
    ),
    _rule(
        "drug_synthesis",
        "drugs",
        rf"\b{_DRUG_PRECURSOR}\b.{{0,150}}\b(?:mix|combine|add|heat|dissolve|extract|reduce|"
        r"filter|evaporate|crush|stir|reflux)\b|\b(?:mix|combine|add|heat|dissolve|extract|reduce|"
        rf"crush)\b.{{0,150}}\b{_DRUG_PRECURSOR}\b",
    ),
    _rule(
        "self_harm_instructions",
        "self_harm",
        r"\b(?:you (?:can|could|should|might)|the (?:best|easiest|quickest|most painless|least "
        r"painful) (?:way|method)(?: to| is)?|try|consider)\b.{0,40}\b(?:kill(?:ing)? yourself|"
        r"end(?:ing)? your (?:own )?life|commit(?:ting)? suicide|hang(?:ing)? yourself|"
        r"overdos(?:e|ing) on|slit(?:ting)? your wrists?|cut(?:ting)? (?:yourself|your wrists?)|"
        r"jump(?:ing)? (?:off|from) (?:a|the) (?:bridge|building|roof))|\b(?:take|swallow)\s+"
        r"(?:all|the whole|\d+|several|enough)\b.{0,30}\b(?:pills|tablets|bottle)\b.{0,40}\b(?:to "
        r"(?:die|end it|kill yourself)|won'?t wake up|will not wake up)",
    ),
]

_SECRETS = [
    _rule(
        "private_key",
        "secret_leak",
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----",
        raw=True,
    ),
    _rule("aws_access_key", "secret_leak", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", raw=True),
    _rule(
        "github_token",
        "secret_leak",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_\w{60,255})",
        raw=True,
    ),
    _rule("openai_key", "secret_leak", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{32,255}", raw=True),
    _rule("slack_token", "secret_leak", r"\bxox[baprs]-[A-Za-z0-9\-]{10,255}", raw=True),
    _rule("google_api_key", "secret_leak", r"\bAIza[0-9A-Za-z_\-]{35}\b", raw=True),
    _rule("stripe_key", "secret_leak", r"\b[sr]k_live_[0-9a-zA-Z]{24,255}", raw=True),
    _rule(
        "jwt",
        "secret_leak",
        r"\beyJ[A-Za-z0-9_\-]{10,1024}\.eyJ[A-Za-z0-9_\-]{10,4096}\.[A-Za-z0-9_\-]{10,1024}",
        raw=True,
    ),
]

INPUT_RULES = RuleSet("input", [*_INJECTION, *_JAILBREAK, *_SMUGGLING, *_SLURS,
                                *_HARMFUL_REQUESTS])  # fmt: skip
OUTPUT_RULES = RuleSet("output", [*_SLURS, *_OUTPUT_HARM, *_SECRETS])
