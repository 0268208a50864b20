"""Glossaries: terms a translation must keep, read from a TSV, CSV or TBX file and found in source sentences.

A TSV glossary has one term a line: `source term<TAB>target term`, or the source term alone
(do-not-translate: the target is the source, e.g. a product name). Either side may list forms
separated by `|`: `woman<TAB>Dame|Damen` lets the output hold any of the target's forms (the first
is the term's own; the search picks the one the sentence needs), `bike|bicycle<TAB>Velo|Velos` is
one term for each source form. A third column may give the target forms' gender and number,
one tag a form or one for all (`man<TAB>Person|Personen<TAB>f|pl`; mt.text.agreement): the words
in front of the term then agree with it. Blank lines are skipped, each side and form is stripped of
surrounding spaces, a UTF-8 byte-order mark is allowed. A `.csv` file is read as CSV and a `.tbx`
file as TBX (mt.text.termbase: Weblate's, memoQ's and Trados's exports; a TBX term marked
deprecated is one the output must avoid). A bad glossary is refused whole, in ONE line naming
`file:line` and the problem (nothing is half-applied): an empty side or form, four or more
columns, a grammar tag it cannot read, a source term given two different targets, more than
`MAX_TERMS` terms, a file that cannot be read, is not UTF-8 or (.tbx) is not TBX. (Terms too
long for the model or that its vocabulary cannot write are refused where the tokenizer is known:
mt.decode.terms.)

How a term is found in a sentence (`Glossary.match`, after `for_pair` set the source language):
- **Word boundaries.** A term matches only as whole words: no letter or digit (`\\w`) may touch
  it where its own first/last character is one. Scripts written without spaces (Chinese,
  Japanese, Thai) therefore match only where the term stands as a whole `\\w` run.
- **Case.** A term with a capital letter matches as written ("Apple" never matches "apple"). A
  term all in lower case also matches with its first letter capitalised at the start of the
  sentence ("house" in "House prices rose"), where only punctuation may precede it.
- **Inflection.** A term's last word also matches a word whose lemma it is, where simplemma knows
  the source language (mt.text.lemma: "women" and "men" match "woman" and "man", "Männer" and
  "Füße" match "Mann" and "Fuß"), the word starting in the same case as the term's. Beside it, and
  alone where there is no lemmatiser, the suffix rules: with `suffixes` (the source language's
  `SUFFIXES`: plural and case endings of Latin-script languages), the last word may carry one of
  them ("cat" matches "cats"), when it is at least `MIN_STEM` letters long (so "a" never matches "as").
- **Overlaps.** The leftmost match wins, the longest at one position; each term is reported
  once per sentence, in order of its first match (`find` gives every match with its span).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from mt.errors import MTError
from mt.text.agreement import UNKNOWN, Grammar, parse_tag
from mt.text.lemma import lemmatizer
from mt.text.termbase import Entry, csv_rows, tbx_entries

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
    forms: tuple[str, ...] = ()  # every target form the output may hold (target first); () = the target alone
    avoid: tuple[str, ...] = ()  # target words the output must not hold (a TBX entry's deprecated terms)
    grammar: tuple[Grammar, ...] = ()  # each of `targets`' gender and number (a third column); () = unknown

    @property
    def targets(self) -> tuple[str, ...]:
        """The target forms that keep the term: `forms`, or the target alone."""
        return self.forms or (self.target,)

    def grammar_of(self, form: str) -> Grammar:
        """`form`'s gender and number: its tag, else (a form the vocabulary adds) the gender every
        tagged form shares, its number unknown; `UNKNOWN` for an untagged term."""
        if form in self.targets and self.grammar:
            return self.grammar[self.targets.index(form)]
        genders = {g.gender for g in self.grammar if g.gender}
        return Grammar(genders.pop()) if len(genders) == 1 else UNKNOWN


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


def _lemma_pattern(term: str, capitalise: bool) -> re.Pattern[str] | None:
    """The regex of a term whose last word may be any word (its lemma is checked after): the
    words before it as written; None for a term not ending in a word of letters."""
    last = _WORD.findall(term)
    if not last or not last[-1].isalpha() or not term.endswith(last[-1]):
        return None
    text = term[:1].upper() + term[1:] if capitalise else term
    before = r"(?<!\w)" if re.match(r"\w", term) else ""
    return re.compile(before + re.escape(text[:len(text) - len(last[-1])]) + r"(\w+)(?!\w)")


@dataclass(frozen=True)
class Glossary:
    """Terms read from `name` (a path, for messages), found in sentences by `match`."""

    name: str
    terms: tuple[Term, ...]
    suffixes: tuple[str, ...] = ()
    language: str = ""  # the source language: its lemmatiser finds inflected forms (mt.text.lemma)
    entries: tuple[Entry, ...] = ()  # a TBX file's concepts: `for_pair` makes them terms
    _by_word: dict[str, list[int]] = field(init=False, compare=False, repr=False)
    _patterns: dict[tuple[int, bool, bool], re.Pattern[str] | None] = field(init=False, compare=False,
                                                                           repr=False)

    def __post_init__(self) -> None:
        by_word: dict[str, list[int]] = {}
        for i, term in enumerate(self.terms):  # candidates by their first word: a sentence tries only those
            by_word.setdefault(_first_word(term.source), []).append(i)
        # derived state of a frozen value (replace() rebuilds it)
        object.__setattr__(self, "_by_word", by_word)
        object.__setattr__(self, "_patterns", {})

    def for_pair(self, source: str, target: str) -> Glossary:
        """This glossary translating `source` into `target`: its terms found with the source
        language's lemmas and suffixes; a TBX file's entries made terms for that pair (MTError in
        one line when none has both languages)."""
        terms = self.terms if not self.entries else _pair_terms(self.entries, source, target, self.name)
        return replace(self, terms=terms, suffixes=suffixes_for(source), language=source)

    def _regex(self, i: int, capitalise: bool, lemma: bool = False) -> re.Pattern[str] | None:
        key = (i, capitalise, lemma)
        if key not in self._patterns:  # compiled on first use: 10,000 terms load in milliseconds
            source = self.terms[i].source
            self._patterns[key] = (_lemma_pattern(source, capitalise) if lemma
                                   else _pattern(source, self.suffixes, capitalise))
        return self._patterns[key]

    def _spans(self, i: int, sentence: str, lemma: Callable[[str], str] | None) -> list[tuple[int, int]]:
        source = self.terms[i].source
        first = _WORD.search(sentence)  # a sentence's start: only punctuation before its first word
        lower = source == source.lower() and source[:1].upper() != source[:1]
        spans = []
        for capitalise in (False, True) if lower and first else (False,):
            for by_lemma in (False, True) if lemma else (False,):
                regex = self._regex(i, capitalise, by_lemma)
                if regex is None:
                    continue
                found = ([regex.match(sentence, first.start())] if capitalise and first
                         else regex.finditer(sentence))
                spans += [m.span() for m in found if m is not None and (not by_lemma or _inflects(
                    m.group(1), _WORD.findall(source)[-1], lemma, capitalise or not lower))]
        return spans

    def find(self, sentence: str) -> list[tuple[Term, int, int]]:
        """Every match in `sentence` (module docstring) with its character span, in order."""
        lemma = lemmatizer(self.language) if self.language else None
        words = {w.casefold() for w in _WORD.findall(sentence)}
        words |= {w[: -len(s)] for w in words for s in self.suffixes if w.endswith(s)}  # "cats" may be "cat"
        if lemma is not None:  # "men" may be "man"
            words |= {lemma(w).casefold() for w in _WORD.findall(sentence)}
        spans = {(start, -end, i) for word in words for i in self._by_word.get(word, ())
                 for start, end in self._spans(i, sentence, lemma)}
        out: list[tuple[Term, int, int]] = []
        reach = 0
        for start, neg_end, i in sorted(spans):
            if start >= reach:
                reach = -neg_end
                out.append((self.terms[i], start, -neg_end))
        return out

    def match(self, sentence: str) -> list[Term]:
        """The terms found in `sentence` (module docstring), each once, in order of first match."""
        return list(dict.fromkeys(term for term, _, _ in self.find(sentence)))


def _inflects(word: str, last: str, lemma: Callable[[str], str] | None, capital: bool) -> bool:
    """Whether `word` is an inflected form of the term's last word `last`: its lemma is `last`
    (casefolded), and it starts in the case `last` has (`capital`: upper case allowed)."""
    if lemma is None or not word[:1].isalpha() or (word[:1].isupper() and not capital):
        return False
    if word[:1].islower() and last[:1].isupper():
        return False
    target = last.casefold()
    return lemma(word).casefold() == target or lemma(word.lower()).casefold() == target


def _primary(language: str) -> str:
    return language.replace("_", "-").split("-")[0].lower()


def _pair_terms(entries: tuple[Entry, ...], source: str, target: str, name: str) -> tuple[Term, ...]:
    """A TBX file's entries as terms from `source` into `target`: every source term of an entry
    (its deprecated ones too) maps to the entry's target terms that are not deprecated (the first
    is the term's, the others forms that keep it too); its deprecated target terms are avoided."""
    src, tgt = _primary(source), _primary(target)
    terms: list[Term] = []
    seen: dict[str, Term] = {}
    for entry in entries:
        by_lang: dict[str, list] = {}
        for lang, found in entry.terms.items():
            by_lang.setdefault(_primary(lang), []).extend(found)
        sources, targets = by_lang.get(src, []), by_lang.get(tgt, [])
        keep = tuple(dict.fromkeys(t.text for t in targets if not t.avoid))
        if not sources or not keep:
            continue
        avoid = tuple(dict.fromkeys(t.text for t in targets if t.avoid))
        for term in sources:
            made = Term(term.text, keep[0], term.line, keep if len(keep) > 1 else (), avoid)
            _add(terms, seen, made, f"glossary {name}:{term.line}")
    if not terms and entries:
        raise MTError(f"glossary {name}: no entry has terms in both {source} and {target}")
    return tuple(terms)


def _add(terms: list[Term], seen: dict[str, Term], term: Term, where: str, max_terms: int = 0) -> None:
    """`term` added unless its source is there already with the same targets; MTError when it has others."""
    if term.source in seen:
        if seen[term.source].targets != term.targets:
            said = "|".join(seen[term.source].targets)
            raise MTError(f"{where}: '{term.source}' -> '{'|'.join(term.targets)}', but line "
                          f"{seen[term.source].line} says '{said}'; a source term has one target")
        return
    if max_terms and len(terms) == max_terms:
        raise MTError(f"{where}: more than {max_terms:,} terms; split the glossary by subject")
    seen[term.source] = term
    terms.append(term)


def occurs(term: str, sentence: str) -> bool:
    """Whether `term` stands in `sentence` by `Glossary.match`'s rules (no suffixes): how term
    success counts a target term in a translation."""
    return bool(Glossary("", (Term(term, term, 0),)).match(sentence))


def occurs_any(forms: tuple[str, ...], sentence: str) -> bool:
    """Whether any of a term's target `forms` stands in `sentence` (`occurs`): one glossary of the
    forms, made once (a form's matches do not depend on the other terms of its glossary)."""
    return bool(_forms_glossary(forms).find(sentence))


@lru_cache(maxsize=1 << 12)
def _forms_glossary(forms: tuple[str, ...]) -> Glossary:
    return Glossary("", tuple(Term(form, form, 0) for form in forms))


def _columns(text: str, where: str) -> tuple[str, str | None, str]:
    """(source, target or None, grammar tags or "") of a TSV line."""
    parts = [part.strip() for part in text.split("\t")]
    if len(parts) > 3:
        raise MTError(f"{where}: {len(parts)} tab-separated columns; a glossary line is 'source<TAB>target', "
                      "'source<TAB>target<TAB>grammar' or a source term alone (kept as it is)")
    return parts[0], parts[1] if len(parts) >= 2 else None, parts[2] if len(parts) == 3 else ""


def _forms(text: str, side: str, where: str) -> tuple[str, ...]:
    """A column's `|`-separated forms, each stripped; MTError for an empty one."""
    forms = tuple(form.strip() for form in text.split("|"))
    if not text.strip():
        hint = " (give the source term alone to keep it as it is)" if side == "target" else ""
        raise MTError(f"{where}: empty {side} term{hint}")
    if not all(forms):
        raise MTError(f"{where}: an empty {side} form in '{text.strip()}' (forms are separated by '|')")
    return tuple(dict.fromkeys(forms))


def _grammar(tags: str, forms: int, where: str) -> tuple[Grammar, ...]:
    """The third column's tags (mt.text.agreement): one for all `forms` target forms, or one a form."""
    if not tags:
        return ()
    found = tuple(parse_tag(tag, where) for tag in tags.split("|"))
    if len(found) == 1:
        return found * forms
    if len(found) != forms:
        raise MTError(f"{where}: {len(found)} grammar tags for {forms} target forms; "
                      "give one tag a form, or one for all")
    return found


def _line_terms(source: str, target: str | None, line: int, where: str, tags: str = "") -> list[Term]:
    """One glossary line's terms: one per source form, each with every target form (a lone
    source column, `target` None: the source forms themselves) and their grammar (`tags`)."""
    sources = _forms(source, "source", where)
    targets = _forms(target, "target", where) if target is not None else sources
    written = [form.strip() for form in target.split("|")] if target is not None else []
    grammar = tuple(dict(zip(written, _grammar(tags, len(written), where))).values())  # a repeated form once
    return [Term(s, targets[0], line, targets if len(targets) > 1 else (), grammar=grammar) for s in sources]


def _rows(data: bytes, name: str) -> list[tuple[int, str, str | None, str]]:
    """(line, source column, target column or None, grammar column or "") of a TSV (or, by
    `name`'s extension, CSV) glossary. A CSV row whose target cell is empty is skipped: a term
    exported untranslated."""
    if name.lower().endswith(".csv"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data[:e.start].count(b"\n") + 1
            raise MTError(f"glossary {name}:{line}: not UTF-8 ({e.reason} at byte {e.start})") from None
        return [(n, s.strip(), None if t is None else t.strip(), "") for n, s, t in csv_rows(text, name)
                if t is None or t.strip()]
    rows = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as e:
            raise MTError(f"glossary {name}:{number}: not UTF-8 ({e.reason} at byte {e.start})") from None
        if line.strip():
            rows.append((number, *_columns(line, f"glossary {name}:{number}")))
    return rows


def parse_glossary(data: bytes, name: str, *, suffixes: tuple[str, ...] = (),
                   max_terms: int = MAX_TERMS) -> Glossary:
    """A glossary file's bytes -> `Glossary` (TSV; CSV or TBX by `name`'s extension, or TBX when
    the data is XML); MTError naming `name:line` for the first problem."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    if name.lower().endswith(".tbx") or data.lstrip()[:5] in (b"<?xml", b"<mart", b"<tbx ", b"<tbx>"):
        entries = tbx_entries(data, name)
        count = sum(len(found) for entry in entries for found in entry.terms.values())
        if count > 2 * max_terms:  # both languages of every term: a coarse bound before the pair is known
            raise MTError(f"glossary {name}: more than {max_terms:,} terms; split the glossary by subject")
        return Glossary(name, (), suffixes, entries=tuple(entries))
    terms: list[Term] = []
    seen: dict[str, Term] = {}
    for number, source, target, tags in _rows(data, name):
        where = f"glossary {name}:{number}"
        if tags and target is None:
            raise MTError(f"{where}: grammar tags without a target term")
        for term in _line_terms(source, target, number, where, tags):
            _add(terms, seen, term, where, max_terms)
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
        raise MTError(f"glossary {path}: over {MAX_BYTES >> 20} MiB; "
                      f"glossaries of at most {max_terms:,} terms are read")
    return parse_glossary(data, str(path), suffixes=suffixes, max_terms=max_terms)
