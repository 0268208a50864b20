"""Language codes as LibreTranslate's clients send them, matched to the codes a model serves.

`ServedLanguages(pairs)` holds a model's (source, target) pairs. Its `match(code, field)` is the one
place a code from a request is read, by every route (/translate's source and target, /v1's target,
/detect's candidates, /suggest): case does not matter (`EN`, `zh-hans`), `_` is `-` (`pt_BR`), the
usual aliases name one language (`zh`, `zh-Hans`, `zh-CN`, `zh-SG`; `zh-Hant`, `zh-TW`, `zh-HK`, `zt`;
`pt`, `pt-BR`, `pt-PT`, `pb`), and a regional code falls back to its language (`en-GB` -> `en`) when
the model serves the language but not the region. A code it does not serve is a 400 naming what it
does serve. `listing()` is GET /languages in LibreTranslate's shape: every language the model
translates from, with its `targets`, then every target language that is not also a source (its
`targets` empty), so clients that read only `code` (Weblate) and those that read `targets`
(Mastodon) both find every pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mt.serve.requests import ApiError

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish",
                  "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "ru": "Russian", "zh": "Chinese",
                  "ja": "Japanese", "ko": "Korean", "ar": "Arabic", "pl": "Polish", "tr": "Turkish",
                  "uk": "Ukrainian",
                  "zh-hant": "Chinese (traditional)", "pt-br": "Portuguese (Brazil)", "sv": "Swedish",
                  "da": "Danish", "fi": "Finnish", "el": "Greek", "hu": "Hungarian", "ro": "Romanian",
                  "bg": "Bulgarian", "hi": "Hindi", "id": "Indonesian", "vi": "Vietnamese", "he": "Hebrew",
                  "fa": "Persian", "th": "Thai", "ca": "Catalan", "et": "Estonian", "lt": "Lithuanian",
                  "lv": "Latvian", "sk": "Slovak", "sl": "Slovenian", "nb": "Norwegian", "ga": "Irish"}

# Codes that name one language: a request's code matches a served code of the same group.
ALIAS_GROUPS = (("zh", "zh-hans", "zh-cn", "zh-sg", "cmn"), ("zh-hant", "zh-tw", "zh-hk", "zt"),
                ("pt", "pt-br", "pt-pt", "pb"), ("nb", "no", "nn"), ("he", "iw"), ("id", "in"))
_GROUP = {code: group for group in ALIAS_GROUPS for code in group}


def normal(code: str) -> str:
    """`code` lower-cased with `_` as `-` and no surrounding spaces (`pt_BR` -> `pt-br`)."""
    return code.strip().lower().replace("_", "-")


def language_name(code: str) -> str:
    """The English name of `code` (the code itself when unknown)."""
    key = normal(code)
    return LANGUAGE_NAMES.get(key) or LANGUAGE_NAMES.get(key.split("-")[0], code)


class ServedLanguages:
    """The languages of a model's pairs, and how a request's code maps onto them (module docstring)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.pairs = list(pairs)
        self.sources = list(dict.fromkeys(s for s, _ in self.pairs))
        self.targets = list(dict.fromkeys(t for _, t in self.pairs))
        self.all = list(dict.fromkeys([*self.sources, *self.targets]))

    def find(self, code: str, among: Sequence[str] | None = None) -> str | None:
        """The served code (of `among`, default every served language) that `code` names, else None."""
        among = self.all if among is None else among
        by_normal = {normal(c): c for c in among}
        key = normal(code)
        if key in by_normal:
            return by_normal[key]
        for alias in _GROUP.get(key, ()):
            if alias in by_normal:
                return by_normal[alias]
        base = key.split("-")[0]  # en-GB -> en (not zh-TW -> zh: an alias group names its variant)
        if base != key and key not in _GROUP:
            return self.find(base, among)
        return None

    def match(self, code: str, field: str, among: Sequence[str] | None = None) -> str:
        """The served code `code` names; a 400 naming the served ones when there is none."""
        found = self.find(code, among)
        if found is None:
            among = self.all if among is None else among
            raise ApiError(400, f"{field} {code}: not served; this server's languages are {', '.join(among)}")
        return found

    def pair(self, source: str, target: str) -> tuple[str, str]:
        """The served (source, target) pair the request's codes name; 400 when the model does not
        translate it."""
        src, tgt = self.find(source, self.sources) or source, self.find(target, self.targets) or target
        if (src, tgt) not in self.pairs:
            served = ", ".join(f"{s}-{t}" for s, t in self.pairs)
            raise ApiError(400, f"language pair {src}-{tgt}: not served; this server translates {served}")
        return src, tgt

    def listing(self) -> list[dict[str, Any]]:
        """GET /languages: each language with the targets it translates into (LibreTranslate's shape)."""
        return [{"code": code, "name": language_name(code),
                 "targets": [t for s, t in self.pairs if s == code]}
                for code in self.all]
