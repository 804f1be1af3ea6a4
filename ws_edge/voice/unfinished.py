"""Do the words stop mid-sentence? (pure)

The audio turn model hears how an utterance sounds; on a pause after "can you tell me how to
get to the" it may still say "finished" (synthetic voices end every phrase with a falling,
final-sounding contour). The words say otherwise: hardly any sentence ends on an article, a
preposition, a conjunction or a possessive, or on a filler ("um"). So the voice loop's
semantic end of turn reads the words of the guess started at the pause (its transcript comes
before its answer could start anyway) and keeps listening when they stop on such a word,
or trail off ("…", a comma, a dash).

The words are listed by grammatical class per language, not fitted to a test set (the
benchmark's held-out utterances, `bench/turn_sets/utterances_heldout.jsonl`, were written
before them). Left out on purpose: words that often end a sentence too (English "that",
"this", "is"; German "das" and the separable particles "an", "auf", "aus", "ein", "mit",
"zu"… as in "mach das Licht aus"; Chinese "的", "这个"). A language not listed: never
unfinished by its words (the audio model alone decides).
"""

from __future__ import annotations

from ws_edge.voice.commands import normalized

# fmt: off
CLOSED_CLASS: dict[str, frozenset[str]] = {
    "en": frozenset({
        "the", "a", "an", "to", "of", "for", "in", "on", "at", "by", "with", "from", "into",
        "onto", "about", "between", "through", "during", "without", "under", "over", "than",
        "and", "or", "but", "because", "so", "if", "when", "while", "although", "unless",
        "my", "your", "his", "her", "our", "their", "its", "um", "uh", "er", "erm", "uhm",
    }),
    "es": frozenset({
        "el", "la", "los", "las", "un", "una", "unos", "unas", "a", "al", "de", "del", "en",
        "con", "por", "para", "sobre", "entre", "hasta", "desde", "sin", "hacia", "y", "e",
        "o", "u", "pero", "porque", "que", "si", "cuando", "mientras", "aunque", "mi", "mis",
        "tu", "tus", "su", "sus", "nuestro", "nuestra", "nuestros", "nuestras", "eh", "em",
    }),
    "fr": frozenset({
        "le", "la", "les", "l'", "un", "une", "des", "du", "de", "d'", "à", "au", "aux", "en",
        "dans", "sur", "sous", "pour", "par", "avec", "sans", "entre", "chez", "vers", "et",
        "ou", "mais", "car", "parce", "que", "qu'", "si", "quand", "lorsque", "mon", "ma",
        "mes", "ton", "ta", "tes", "son", "sa", "ses", "notre", "nos", "votre", "vos",
        "leur", "leurs", "ce", "cet", "cette", "euh", "hum",
    }),
    "de": frozenset({
        "der", "die", "den", "dem", "des", "eine", "einen", "einem", "einer", "eines", "zum",
        "zur", "in", "im", "am", "ins", "für", "von", "vom", "über", "zwischen", "durch", "ohne",
        "gegen", "während", "und", "oder", "aber", "weil", "dass", "wenn", "ob", "obwohl",
        "mein", "meine", "meinen", "meinem", "meiner", "dein", "deine", "deinen", "sein",
        "seine", "seinen", "unser", "unsere", "euer", "eure", "äh", "ähm",
    }),
    "it": frozenset({
        "il", "lo", "la", "i", "gli", "le", "un", "uno", "una", "di", "del", "della", "a",
        "al", "alla", "da", "in", "nel", "nella", "con", "su", "per", "tra", "fra", "e", "o",
        "ma", "perché", "che", "se", "quando", "mio", "mia", "miei", "mie", "ehm",
    }),
    "pt": frozenset({
        "o", "a", "os", "as", "um", "uma", "de", "do", "da", "dos", "das", "em", "no", "na",
        "com", "por", "para", "sobre", "entre", "e", "ou", "mas", "porque", "que", "se",
        "quando", "meu", "minha", "meus", "minhas", "seu", "sua",
    }),
    # written without spaces: the text's last characters
    "zh": frozenset({
        "和", "跟", "与", "因为", "所以", "但是", "可是", "然后", "而且", "或者", "如果",
        "关于", "把", "被", "从", "向", "往", "比", "对于", "一个", "一本", "一张", "一些",
        "我的", "你的", "嗯", "呃", "就是",
    }),
    "ja": frozenset({
        "を", "に", "が", "は", "で", "と", "へ", "から", "けど", "けれど", "ので", "えーと",
        "あの",
    }),
}
# fmt: on

# below this P(the message ends here) from the preprocessing worker's text model (English), the
# words stop mid-sentence: true texts of half sentences score <= 0.002 and whole ones >= 0.1
ENDS_SENTENCE_BAR = 0.01

# words the ASR heard this unsure say nothing of where the sentence is: a decode whose tokens'
# mean log-probability is below UNREADABLE_LOGPROB, or whose language (detected, or the
# client's) the model gives less than UNSURE_LANGUAGE. Chosen on bench.turn_taking's dev set
# (2026-12-07): every decode of piper's English voice scored above -0.75, and most of Whisper
# base's decodes of espeak's foreign voices (half their words wrong) below -0.8 or in a
# language it was unsure of
UNREADABLE_LOGPROB = -0.8
UNSURE_LANGUAGE = 0.8

TRAILING_OFF = ("...", "…", ",", "\uff0c", "、", "-", "—")  # \uff0c: a full-width comma
_NO_SPACES = frozenset({"zh", "ja"})


def sounds_unfinished(text: str, language: str) -> bool:
    """The transcript `text` (in `language`, ISO 639-1) stops mid-sentence: it trails off,
    or its last word is one a sentence hardly ends on."""
    stripped = text.strip()
    if not stripped:
        return False
    if stripped.endswith(TRAILING_OFF):
        return True
    words = CLOSED_CLASS.get(language)
    if words is None:
        return False
    said = normalized(stripped)
    if language in _NO_SPACES:
        compact = said.replace(" ", "")
        return any(compact.endswith(word) for word in words)
    return bool(said) and said.split()[-1] in words


def unreadable(logprob: float, language_probability: float) -> bool:
    """The ASR could not read the speech (`logprob`: the mean log-probability of its tokens;
    `language_probability`: how sure it was the speech is in the language it detected or was
    given): a voice or a language it mishears, whose words end anywhere."""
    return logprob < UNREADABLE_LOGPROB or language_probability < UNSURE_LANGUAGE


def guess_unfinished(
    text: str, language: str, ends_sentence: float = -1.0, *, readable: bool = True
) -> bool:
    """The words of a guess keep the turn open: they stop mid-sentence by the word lists or
    by the text model's probability that the message ends there (`ends_sentence`, -1: not
    judged), or they were not `readable` (words misheard cannot confirm an end: the turn
    waits as for an unfinished sentence, the price of a voice the ASR cannot read)."""
    if not readable:
        return True
    if 0.0 <= ends_sentence < ENDS_SENTENCE_BAR:
        return True
    return sounds_unfinished(text, language)
