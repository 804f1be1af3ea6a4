"""Names of the languages the speech path can hear (Whisper's ISO 639-1 codes): what the
prompt tells the model to answer in (pure data)."""

from __future__ import annotations

from types import MappingProxyType

LANGUAGE_NAMES = MappingProxyType(
    {
        "en": "English", "zh": "Chinese", "es": "Spanish", "fr": "French", "de": "German",
        "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "ru": "Russian",
        "tr": "Turkish", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "no": "Norwegian",
        "cs": "Czech", "el": "Greek", "hu": "Hungarian", "ro": "Romanian", "uk": "Ukrainian",
        "ja": "Japanese", "ko": "Korean", "hi": "Hindi", "ar": "Arabic", "vi": "Vietnamese",
        "id": "Indonesian", "he": "Hebrew", "th": "Thai", "fa": "Persian", "bn": "Bengali",
    }
)  # fmt: skip


def language_name(code: str) -> str:
    """The English name of an ISO 639-1 code, or "" when unknown (then nothing is said)."""
    return LANGUAGE_NAMES.get(code, "")
