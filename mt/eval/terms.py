"""Term success and term placement: how a translation kept a glossary's terms (`mt evaluate --glossary`).

**Term success.** For every sentence, each term whose source side is found in the source
(`Glossary.match`: word boundaries, case, lemmas and suffixes) is one occurrence; it is kept when
one of its target forms (`Term.targets`: the target, or the forms its line lists) stands in the
hypothesis by the same rules without inflection (`mt.text.glossary.occurs`): an exact form, as in
the term-success figures of Dinu et al. 2019 and the WMT21 terminology task's exact match. A term
found twice in one sentence counts once.

**Agreement** (`agreement`, issue 72), for terms whose gender or number differ from the usual
word's: of the term forms a hypothesis holds whose grammar the glossary gives (its third column),
those whose determiner and adjectives cannot agree with them ("Ein Person": mt.text.agreement,
German), those whose number is not the source word's (a singular "man" given "Personen"), and
those standing right beside another noun (a capitalised word that is neither the first word nor
a form of the term: "ein Mann Person", the term put beside the model's word instead of in its place).

**Placement** (`placement`), for glossaries whose terms replace the usual word (a company's
"Kerl" for "Mann"), where term success alone reads 100% with the usual word left beside the term:
- the *usual word* of an occurrence is the reference word that translates the source term (the
  model's cross-attention over the reference forced through it, `mt.decode.swap.own_words`),
  where that word is not a form of the term;
- **exclusivity** is the share of those occurrences whose hypothesis holds a form of the term and
  not the usual word (the term replaced it rather than joined it);
- the **term-rewritten reference** is the reference with each usual word replaced by the term: its
  first form where the source held the term as written, its second (a plural, by the glossary's
  convention) where the source held an inflected form; BLEU against it says whether the term
  took the usual word's place in a fluent sentence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mt.decode.swap import own_words
from mt.errors import MTError
from mt.text.agreement import MAX_BETWEEN, UNKNOWN, agrees, source_number
from mt.text.glossary import Glossary, occurs, occurs_any


@dataclass(frozen=True)
class TermSuccess:
    """Term occurrences in the sources, how many the hypotheses kept, and in how many sentences."""

    terms: int
    kept: int
    sentences: int

    @property
    def rate(self) -> float:
        """Kept occurrences in percent (NaN when no term was found)."""
        return 100.0 * self.kept / self.terms if self.terms else math.nan

    def to_dict(self) -> dict[str, float | int | None]:
        return {"terms": self.terms, "kept": self.kept, "sentences": self.sentences,
                "rate": None if not self.terms else round(self.rate, 4)}

    def line(self) -> str:
        """What `mt evaluate` prints beside BLEU."""
        if not self.terms:
            return "no glossary term found in the source"
        return (f"{self.rate:6.2f}  ({self.kept} of {self.terms} term occurrences kept, "
                f"in {self.sentences} sentences)")


def term_success(sources: Sequence[str], hyps: Sequence[str], glossary: Glossary) -> TermSuccess:
    """`TermSuccess` of `hyps` translating `sources` (same order) with `glossary`'s terms."""
    if len(sources) != len(hyps):
        raise MTError(f"term success: {len(sources)} sources but {len(hyps)} hypotheses")
    terms = kept = sentences = 0
    for source, hyp in zip(sources, hyps):
        found = glossary.match(source)
        terms += len(found)
        kept += sum(occurs_any(term.targets, hyp) for term in found)
        sentences += bool(found)
    return TermSuccess(terms, kept, sentences)


@dataclass(frozen=True)
class Placement:
    """Term occurrences with a usual word in their reference, those whose hypothesis holds the
    term and not that word, and the term-rewritten references (module docstring)."""

    slots: int
    exclusive: int
    rewritten: list[str]

    @property
    def exclusivity(self) -> float:
        """Exclusive occurrences in percent (NaN without any)."""
        return 100.0 * self.exclusive / self.slots if self.slots else math.nan

    def to_dict(self) -> dict[str, float | int | None]:
        return {"slots": self.slots, "exclusive": self.exclusive,
                "exclusivity": None if not self.slots else round(self.exclusivity, 4)}


def placement(sources: Sequence[str], refs: Sequence[str], hyps: Sequence[str], glossary: Glossary,
              alignments: Sequence[Sequence[int]]) -> Placement:
    """`Placement` of `hyps` (module docstring); `alignments`: `mt.decode.align.align_words` of
    (sources, refs) through the model."""
    if not len(sources) == len(refs) == len(hyps):
        raise MTError(f"term placement: {len(sources)} sources, {len(refs)} references, "
                      f"{len(hyps)} hypotheses")
    slots = exclusive = 0
    rewritten = []
    for source, ref, hyp, found in zip(sources, refs, hyps, own_words(glossary, sources, refs, alignments)):
        words = ref.split()
        spans = {term: (begin, end) for term, begin, end in reversed(glossary.find(source))}  # first match
        for term, usual, at in found:
            if occurs_any(term.targets, usual):
                continue
            slots += 1
            exclusive += occurs_any(term.targets, hyp) and not occurs(usual, hyp)
            begin, end = spans[term]
            inflected = source[begin:end].casefold() != term.source.casefold() and len(term.targets) > 1
            words[at] = words[at].replace(usual, term.targets[1 if inflected else 0], 1)
        rewritten.append(" ".join(words) if found else ref)
    return Placement(slots, exclusive, rewritten)


def usual_words_left(hyps: Sequence[str], sources: Sequence[str], glossary: Glossary,
                     usual: dict[str, set[str]]) -> tuple[int, int]:
    """(term occurrences whose hypothesis holds the term, those of them also holding one of the
    term's usual words) with the usual words given by target term (`usual[term.target]`): the
    rate at which the model's own word is left beside the term, on a test whose references were
    rewritten from a known table (scripts/experiments/exp_glossary.py)."""
    slots = beside = 0
    for source, hyp in zip(sources, hyps):
        for term in glossary.match(source):
            if occurs_any(term.targets, hyp):
                slots += 1
                beside += any(occurs(word, hyp) for word in usual.get(term.target, ()))
    return slots, beside




@dataclass(frozen=True)
class Agreement:
    """Term forms with a known grammar in hypotheses (`agreement`): those with a determiner in
    front (`phrases`) and those of them that cannot agree; those whose source word's number is known
    (`numbered`) and those of another number; and the forms standing beside another noun."""

    forms: int
    phrases: int
    disagreeing: int
    numbered: int
    wrong_number: int
    beside_noun: int

    def to_dict(self) -> dict[str, float | int | None]:
        def rate(part: int, whole: int) -> float | None:
            return round(100.0 * part / whole, 2) if whole else None
        return {"forms": self.forms, "phrases": self.phrases, "disagreeing": self.disagreeing,
                "disagreeing_rate": rate(self.disagreeing, self.phrases), "numbered": self.numbered,
                "wrong_number": self.wrong_number,
                "wrong_number_rate": rate(self.wrong_number, self.numbered),
                "beside_noun": self.beside_noun, "beside_noun_rate": rate(self.beside_noun, self.forms)}


def agreement(sources: Sequence[str], hyps: Sequence[str], glossary: Glossary, language: str) -> Agreement:
    """`Agreement` of `hyps` (target `language`) translating `sources` with `glossary`'s terms."""
    if len(sources) != len(hyps):
        raise MTError(f"agreement: {len(sources)} sources but {len(hyps)} hypotheses")
    forms = phrases = disagreeing = numbered = wrong = beside = 0
    for source, hyp in zip(sources, hyps):
        words = [w.strip(".,;:!?\"'()") for w in hyp.split()]
        for term, begin, end in glossary.find(source):
            said = source[begin:end].split()
            number = source_number(said[-1:], glossary.language) if said else None
            for at, word in enumerate(words):
                if word not in term.targets or term.grammar_of(word) == UNKNOWN:
                    continue
                grammar = term.grammar_of(word)
                forms += 1
                before = hyp.split()[max(0, at - MAX_BETWEEN - 1):at]
                agreeing = agrees(before, grammar, language)
                phrases += agreeing is not None
                disagreeing += agreeing is False
                if number is not None and grammar.number is not None:
                    numbered += 1
                    wrong += grammar.number != number
                neighbours = [words[k] for k in (at - 1, at + 1) if 0 < k < len(words)]
                beside += any(w[:1].isupper() and w not in term.targets for w in neighbours)
    return Agreement(forms, phrases, disagreeing, numbered, wrong, beside)
