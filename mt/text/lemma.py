"""Lemmas of words, for finding a glossary's terms in every inflection (mt.text.glossary).

`lemmatizer(language)` is simplemma's dictionary lemmatiser for that language (about 50 languages;
the optional `terms` extra installs it: `pip install -e '.[terms]'`), or None where simplemma is not
installed or does not know the language: there a glossary falls back to its suffix rules
(`mt.text.glossary.SUFFIXES`), which cannot see stem changes ("men" -> "man", "Männer" -> "Mann").
simplemma was chosen over spaCy and Stanza: no model download, no dependency, one dictionary per
language read on first use (about 1.5 s for English or German on the 2-core Xeon; cached after),
and a lemma lookup of a few microseconds. It reads the word alone, without its sentence, so an
ambiguous form takes its commonest lemma ("saw" -> "see"): the glossary therefore compares a
word's lemma with the term as written (a glossary holds base forms), not the term's own lemma.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from importlib.util import find_spec


def supported() -> frozenset[str]:
    """The languages simplemma lemmatises (ISO 639-1/3 codes); empty when it is not installed."""
    if find_spec("simplemma") is None:
        return frozenset()
    from simplemma.strategies.dictionaries.dictionary_factory import SUPPORTED_LANGUAGES

    return frozenset(SUPPORTED_LANGUAGES)


@cache
def lemmatizer(language: str) -> Callable[[str], str] | None:
    """`word -> its lemma` in `language` (`de`, `en-GB`: the primary subtag counts), None where
    simplemma is missing or lacks the language. An unknown word is its own lemma."""
    code = language.split("-")[0].split("_")[0].lower()
    if not code or code not in supported():
        return None
    from simplemma import lemmatize

    @lru_cache(maxsize=1 << 16)
    def lemma(word: str) -> str:
        return lemmatize(word, lang=code)

    return lemma
