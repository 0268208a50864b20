"""Language identification for POST /detect and `source: "auto"`: py3langid (a maintained fork of
langid.py: a naive Bayes model over byte n-grams, 142 languages, its model inside its 4.6 MB wheel,
nothing downloaded at run time; numpy only), restricted to the languages the server serves.

The model and the language codes are `mt.data.langid`'s (`load_identifier`, `langid_code`); this
module owns the restriction to the served languages and the /detect answer.

`LanguageDetector(languages)` loads a model of its own (about 0.7 s; the server does it in its
start-up thread, after the model) and keeps only the served languages it knows (a served `pt-BR`
is langid's `pt`, `zh-Hant` its `zh`, `nb` its `no`; a code it does not know cannot be detected).
`rank(text)` is LibreTranslate's /detect answer: [{"confidence": percent, "language": served
code}, ...], best first, confidence rounded to a whole percent as LibreTranslate's detector does.
Text without evidence (no letters, or every language equally likely) is the first served language
at confidence 0, as LibreTranslate answers "en" at 0 when it cannot tell.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from mt.data.langid import langid_code, load_identifier

TOP = 3  # candidates /detect lists, as LibreTranslate's detector


class LanguageDetector:
    """py3langid over the served `languages` (module docstring)."""

    def __init__(self, languages: Sequence[str]) -> None:
        identifier = load_identifier()  # its own: set_languages below narrows it
        known = set(identifier.nb_classes)
        self.served: dict[str, str] = {}  # langid's code -> the served code (the first of its variants)
        for code in languages:
            self.served.setdefault(langid_code(code), code)
        self.served = {label: code for label, code in self.served.items() if label in known}
        self.fallback = languages[0]
        self.identifier = identifier
        if len(self.served) > 1:
            identifier.set_languages(sorted(self.served))

    @property
    def languages(self) -> list[str]:
        """The served codes it can tell apart."""
        return list(self.served.values())

    def rank(self, text: str, top: int = TOP) -> list[dict[str, Any]]:
        """[{"confidence", "language"}] best first (at most `top`), as LibreTranslate's /detect."""
        if not any(ch.isalpha() for ch in text):  # no words: nothing to tell
            return [{"confidence": 0.0, "language": self.fallback}]
        if len(self.served) < 2:  # nothing to tell apart
            return [{"confidence": 100.0 if self.served else 0.0,
                     "language": next(iter(self.served.values()), self.fallback)}]
        ranked = self.identifier.rank(text)
        if ranked[0][1] - ranked[-1][1] < 1e-6:  # uniform: no evidence either way
            return [{"confidence": 0.0, "language": self.fallback}]
        return [{"confidence": float(round(prob * 100)), "language": self.served[label]}
                for label, prob in ranked[:top]]

    def detect(self, text: str) -> dict[str, Any]:
        """The best {"confidence", "language"} for `text` (LibreTranslate's detectedLanguage)."""
        return self.rank(text, 1)[0]


@functools.lru_cache(maxsize=4)
def detector_for(languages: tuple[str, ...]) -> LanguageDetector:
    """The detector over `languages`, built once per set of languages: a reload that serves the same
    languages keeps it. Built afresh in each reload's thread, its ~30 MB of arrays landed in another
    malloc arena each time and the server's memory grew by steps of ~60 MB over reloads (20-minute
    soak, docs/guides/hardening.md)."""
    return LanguageDetector(languages)
