"""Language identification: py3langid 0.4.0 (langid.py's maintained fork: naive Bayes over byte
n-grams, its model inside its wheel, nothing downloaded at run time; numpy only; about 20,000 short
lines/s on one core).

This module owns mt's use of py3langid: loading its model (`load_identifier`) and the code
normalisation (`langid_code`: a config's or a server's language code -> py3langid's label). The
cleaning stage's `LanguageID` is here; the server's detector (`mt.serve.detect`) uses both.

`LanguageID(langs)` loads the model once (about 0.7 s) and judges lines against their expected
language: a line is in the wrong language when the model's best language differs from the
expected one with a normalised probability of at least `threshold`. That is one-sided on purpose:
short captions ("A man in blue doing kung fu.") are sometimes best guessed as a neighbour at a low
probability, and such doubt keeps the pair; text that is confidently something else goes.

Languages the model does not cover (it knows 140 labels, mostly ISO 639-1 codes; see `covers`) are
not checked: `uncovered` names them and the cleaning report carries the note.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from mt.data.clean_rules import base_language
from mt.errors import MTError

# Codes a config may use for a language py3langid knows under another code.
_ALIASES = {"nb": "no", "iw": "he", "in": "id", "ji": "yi", "zh-cn": "zh", "fil": "tl"}


def langid_code(lang: str) -> str:
    """The py3langid label of a config's language code ('pt-BR' -> 'pt', 'nb' -> 'no')."""
    code = lang.strip().lower()
    return _ALIASES.get(code, _ALIASES.get(base_language(code), base_language(code)))


def load_identifier() -> Any:
    """A py3langid identifier of its own, with normalised probabilities (about 0.7 s, ~30 MB of
    arrays): for a caller that narrows its languages with `set_languages`, as the server's detector
    does. ImportError without py3langid."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@functools.lru_cache(maxsize=1)  # one model per process (read-only here: no set_languages)
def _identifier() -> Any:
    try:
        return load_identifier()
    except ImportError:
        raise MTError("clean.rules: the 'langid' rule needs py3langid "
                      "(pip install -e '.[clean]' in mt's checkout, "
                      "or leave 'langid' out of clean.rules)") from None


class LanguageID:
    """py3langid, judging lines against the languages of `langs` (module docstring)."""

    def __init__(self, langs: Iterable[str], threshold: float) -> None:
        self.identifier = _identifier()
        self.threshold = threshold
        known = set(self.identifier.nb_classes)
        self.labels = {lang: langid_code(lang) for lang in langs}
        self.uncovered = sorted(lang for lang, label in self.labels.items() if label not in known)

    def covers(self, lang: str) -> bool:
        return lang not in self.uncovered

    def wrong_language(self, text: str, lang: str) -> str | None:
        """'<label> <prob>' when `text` is confidently (>= threshold) another language than `lang`,
        else None (also for a language the model does not cover)."""
        if lang in self.uncovered:
            return None
        label, prob = self.identifier.classify(text)
        if label != self.labels[lang] and prob >= self.threshold:
            return f"{label} {prob:.2f}"
        return None
