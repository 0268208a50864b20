"""Glossaries: terms a translation must keep, read from a TSV and found in source sentences.

A glossary file has one term a line: `source term<TAB>target term`, or the source term alone
(do-not-translate: the target is the source, e.g. a product name). Blank lines are skipped, each
side is stripped of surrounding spaces, a UTF-8 byte-order mark is allowed. A bad glossary is
refused whole, in ONE line naming `file:line` and the problem (nothing is half-applied): an
empty side, three or more columns, a source term given two different targets, more than
`MAX_TERMS` terms, a file that cannot be read or is not UTF-8. (Terms too long for the model or
that its vocabulary cannot write are refused where the tokenizer is known: mt.decode.terms.)

How a term is found in a sentence (`Glossary.match`):
- **Word boundaries.** A term matches only as whole words: no letter or digit (`\\w`) may touch
  it where its own first/last character is one. Scripts written without spaces (Chinese,
  Japanese, Thai) therefore match only where the term stands as a whole `\\w` run.
- **Case.** A term with a capital letter matches as written ("Apple" never matches "apple"). A
  term all in lower case also matches with its first letter capitalised at the start of the
  sentence ("house" in "House prices rose"), where only punctuation may precede it.
- **Inflection, where simple.** With `suffixes` (the source language's `SUFFIXES`: plural and
  case endings of Latin-script languages), a term's last word may carry one of them ("cat"
  matches "cats"), when that word is at least `MIN_STEM` letters long (so "a" never matches
  "as"). Suffixing only: no stem change ("mouse"/"mice", German umlaut plurals) is matched.
- **Overlaps.** The leftmost match wins, the longest at one position; each term is reported
  once per sentence, in order of its first match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mt.errors import MTError

MAX_TERMS = 10_000  # terms in one glossary: bounds load time, memory and per-sentence matching
MAX_BYTES = 16 << 20  # a glossary file larger than this is refused before it is read whole
MIN_STEM = 3  # letters a term's last word needs before an inflectional suffix may follow it
# Inflectional endings that are plain suffixes, by source language (ISO 639-1). Longest first is
# not needed: the regex backtracks to the one that ends at a word boundary.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "en": ("s", "es", "'s", "\u2019s"),
    "de": ("e", "en", "n", "s", "es", "er", "ern", "ens"),
    "fr": ("s", "x"),
    "es": ("s", "es"),
    "pt": ("s", "es"),
    "nl": ("s", "en", "'s"),
}
_WORD = re.compile(r"\w+")


def suffixes_for(language: str) -> tuple[str, ...]:
    """The inflectional suffixes a term may take in `language` (none for a language not in `SUFFIXES`)."""
    return SUFFIXES.get(language.split("-")[0].lower(), ())


@dataclass(frozen=True)
class Term:
    """One glossary entry: the source term, what it must become, and its line in the file."""

    source: str
    target: str
    line: int


def _first_word(text: str) -> str:
    found = _WORD.search(text)
    return found.group().casefold() if found else ""


def _pattern(term: str, suffixes: tuple[str, ...], capitalise: bool) -> re.Pattern[str]:
    """The regex of one term (see the module docstring): boundaries where its edges are word
    characters, an optional suffix after a long enough final word, first letter capitalised on request."""
    text = term[:1].upper() + term[1:] if capitalise else term
    body = re.escape(text)
    last = _WORD.findall(term)
    if suffixes and last and term[-1].isalpha() and len(last[-1]) >= MIN_STEM:
        body += "(?:" + "|".join(re.escape(s) for s in suffixes) + ")?"
    before = r"(?<!\w)" if re.match(r"\w", term) else ""
    after = r"(?!\w)" if re.search(r"\w$", term) else ""
    return re.compile(before + body + after)


@dataclass(frozen=True)
class Glossary:
    """Terms read from `name` (a path, for messages), found in sentences by `match`."""

    name: str
    terms: tuple[Term, ...]
    suffixes: tuple[str, ...] = ()
    _by_word: dict[str, list[int]] = field(init=False, compare=False, repr=False)
    _patterns: dict[tuple[int, bool], re.Pattern[str]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        by_word: dict[str, list[int]] = {}
        for i, term in enumerate(self.terms):  # candidates by their first word: a sentence tries only those
            by_word.setdefault(_first_word(term.source), []).append(i)
        object.__setattr__(self, "_by_word", by_word)  # derived state of a frozen value (replace() rebuilds it)
        object.__setattr__(self, "_patterns", {})

    def _regex(self, i: int, capitalise: bool) -> re.Pattern[str]:
        key = (i, capitalise)
        if key not in self._patterns:  # compiled on first use: 10,000 terms load in milliseconds
            self._patterns[key] = _pattern(self.terms[i].source, self.suffixes, capitalise)
        return self._patterns[key]

    def _spans(self, i: int, sentence: str) -> list[tuple[int, int]]:
        spans = [m.span() for m in self._regex(i, False).finditer(sentence)]
        source = self.terms[i].source
        first = _WORD.search(sentence)  # a sentence's start: only punctuation before its first word
        if first and source == source.lower() and source[:1].upper() != source[:1]:
            at_start = self._regex(i, True).match(sentence, first.start())
            if at_start is not None:
                spans.append(at_start.span())
        return spans

    def match(self, sentence: str) -> list[Term]:
        """The terms found in `sentence` (module docstring), each once, in order of first match."""
        words = {w.casefold() for w in _WORD.findall(sentence)}
        words |= {w[: -len(s)] for w in words for s in self.suffixes if w.endswith(s)}  # "cats" may be "cat"
        spans = [(start, -end, i) for word in words for i in self._by_word.get(word, ())
                 for start, end in self._spans(i, sentence)]
        found: list[int] = []
        reach = 0
        for start, neg_end, i in sorted(spans):
            if start >= reach:
                reach = -neg_end
                if i not in found:
                    found.append(i)
        return [self.terms[i] for i in found]


def occurs(term: str, sentence: str) -> bool:
    """Whether `term` stands in `sentence` by `Glossary.match`'s rules (no suffixes): how term
    success counts a target term in a translation."""
    return bool(Glossary("", (Term(term, term, 0),)).match(sentence))


def _columns(text: str, where: str) -> tuple[str, str]:
    parts = [part.strip() for part in text.split("\t")]
    if len(parts) > 2:
        raise MTError(f"{where}: {len(parts)} tab-separated columns; a glossary line is 'source<TAB>target', "
                      "or a source term alone (kept as it is)")
    source, target = parts[0], parts[-1]
    if not source:
        raise MTError(f"{where}: empty source term")
    if not target:
        raise MTError(f"{where}: empty target term (give the source term alone to keep it as it is)")
    return source, target


def parse_glossary(data: bytes, name: str, *, suffixes: tuple[str, ...] = (), max_terms: int = MAX_TERMS) -> Glossary:
    """A glossary file's bytes -> `Glossary`; MTError naming `name:line` for the first problem."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    terms: list[Term] = []
    seen: dict[str, Term] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        where = f"glossary {name}:{number}"
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as e:
            raise MTError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
        if not line.strip():
            continue
        source, target = _columns(line, where)
        if source in seen:
            if seen[source].target != target:
                raise MTError(f"{where}: '{source}' -> '{target}', but line {seen[source].line} says "
                              f"'{seen[source].target}'; a source term has one target")
            continue
        if len(terms) == max_terms:
            raise MTError(f"{where}: more than {max_terms:,} terms; split the glossary by subject")
        seen[source] = Term(source, target, number)
        terms.append(seen[source])
    return Glossary(name, tuple(terms), suffixes)


def read_glossary(path: Path, *, suffixes: tuple[str, ...] = (), max_terms: int = MAX_TERMS) -> Glossary:
    """`parse_glossary` of the file at `path`; MTError in one line when it cannot be read."""
    try:
        if path.is_dir():
            raise MTError(f"glossary {path}: is a folder")
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise MTError(f"glossary {path}: cannot read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise MTError(f"glossary {path}: over {MAX_BYTES >> 20} MiB; glossaries of at most {max_terms:,} terms are read")
    return parse_glossary(data, str(path), suffixes=suffixes, max_terms=max_terms)
