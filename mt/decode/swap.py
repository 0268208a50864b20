"""A glossary term put in the place of the model's own word: the first pass of the constrain
stage (`mt.decode.pipeline.constrain`), over the constraints of mt.decode.terms.

**Replacing the model's word.** A term is meant to stand where the model's own word would
(Kerl, not Mann), not beside it. The default, "swap" (`swapping`), starts from the search's own
translation of each sentence holding a term, finds in it the model's word for each term (every
word with the lemma of a word the model gives the source term translated alone, else the word its
cross-attention aligns with the term, mt.decode.align) and offers the model that translation with
the word replaced by each of the term's forms; the choice stage keeps the one the model scores
best (the path's `Choose` step, mt.decode.forced.choose_outputs), so everything around the term
stays as the model wrote it, except, where the glossary gives the term's gender and number, the
determiner and adjectives in front of it, which are offered in agreement with it (issue 72,
mt.text.agreement: "Ein Person" never stands; `agreeing` does the same for a constrained
search's output). A sentence where no such word is found takes the constrained search, avoiding the
model's words (`replacing`: the word the model gave the source term, `own_words`, in both initial
cases and with its vocabulary forms, avoided with the words a TBX entry marks deprecated, and the
output starting as the first translation does up to that word). The ways issue 65 compared and
left out ("avoid", "place", "both": a greedy first pass and the constrained search for every
sentence) live in scripts/experiments/exp_glossary.py, over `replacing`.
On the issue's five company terms (docs/guides/serve.md, Glossaries; the make demo model, 2-core
Xeon, one thread) "swap" scored 32.36 BLEU against term-rewritten references where plain output
scores 32.79 against the originals ("both": 30.04), left the model's word beside the term in 0 of
611 cases (8) and ran at 0.58x plain speed (0.25x; scripts/bench/bench_glossary.py).
The constrain stage (mt.decode.pipeline) runs it for every caller unless `first_pass` is "off".
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mt.config import DecodeConfig
from mt.data.tokenizer import UNK_ID, Tokenizer
from mt.decode.terms import (
    UNSPACED,
    WORD_START,
    Occurrences,
    TermConstraints,
    both_cases,
    terms_in,
    vocabulary_forms,
)
from mt.decode.wanted import Choices, Wanted
from mt.text.agreement import UNKNOWN, Grammar, following_number, phrase_variants, source_number
from mt.text.glossary import Glossary, Term, occurs_any
from mt.text.lemma import lemmatizer

MAX_CHOICES = 64  # outputs one line's swap offers the model (the product of its terms' forms, cut here)
ALONE_NBEST = 5  # translations of a term alone whose words "swap" looks for in the output
MIN_ALIGNED = 4  # letters of a word aligned with a term before a swap replaces it (not "a", "the", "der")


def own_words(glossary: Glossary, sources: Sequence[str], targets: Sequence[str],
              alignments: Sequence[Sequence[int]], *, last: bool = False,
              occurrences: Sequence[Occurrences] | None = None) -> list[list[tuple[Term, str, int]]]:
    """For each (source, target) pair, the word of `target` that translates each term occurrence
    of `source` (`Glossary.find`), with its index in `target.split()`: of the target words the
    model aligns with one of the term's source words (`alignments`: `mt.decode.align.align_words`
    of the pairs, what the server's worker computes too): a word not first in the sentence before
    the first (whose capital says nothing), one starting in the case the term's target starts in
    (a German noun, not its article "einem"), the longest (the noun rather than "ein"), the first
    of equal length (`last`: the last, as for a term translated alone, "Eine Frau"). The word is
    stripped of punctuation; an occurrence no word translates is left out. `occurrences`: each
    source's (`TermConstraints.occurrences`), when the caller has them."""
    out: list[list[tuple[Term, str, int]]] = []
    finds = occurrences if occurrences is not None else [glossary.find(source) for source in sources]
    for source, target, aligned, found_here in zip(sources, targets, alignments, finds):
        found: list[tuple[Term, str, int]] = []
        words = [_bare(word) for word in target.split()]
        spans = [m.span() for m in re.finditer(r"\S+", source)]  # the words of source.split()
        for term, begin, end in found_here:
            span = {i for i, (ws, we) in enumerate(spans) if ws < end and begin < we}
            ts = [t for t, s in enumerate(aligned[:len(words)]) if s in span and words[t]]
            case = term.target[:1].isupper()
            candidates = [(t == 0 and len(ts) > 1, t > 0 and words[t][:1].isupper() != case, -len(words[t]),
                           -t if last else t) for t in ts]
            if candidates:
                t = abs(min(candidates)[3])
                found.append((term, words[t], t))
        out.append(found)
    return out


def _bare(word: str) -> str:
    """A whitespace-separated word without the punctuation around it ('' for punctuation alone)."""
    found = re.search(r"\w+(?:[-'\u2019]\w+)*", word)
    return found.group() if found else ""


def replacing(terms: TermConstraints, lines: Sequence[str], firsts: Sequence[str],
              alignments: Sequence[Sequence[int]], tokenizer: Tokenizer,
              alone: dict[str, str] | None = None, occurrences: Sequence[Occurrences] | None = None, *,
              place: bool = True) -> list[Wanted]:
    """Constraints of `lines` that keep their terms and avoid the words a first translation
    `firsts` (one per line) gave them, with their forms the target vocabulary holds (module
    docstring); with `place`, each output starts as its first translation does up to the first such
    word. `alignments`: `align_words(lines, firsts)`; `alone` ("both"): each
    term source's word when translated alone (`alone_words`), avoided too. `occurrences`: each
    line's terms (`TermConstraints.occurrences`), when the caller has them."""
    occurrences = terms.occurrences(lines) if occurrences is None else occurrences
    matched = [terms_in(found) for found in occurrences]
    lemma = lemmatizer(terms.language) if terms.language else None
    by_lemma = vocabulary_forms(tokenizer, terms.language) if lemma is not None else {}
    out = []
    found = own_words(terms.glossary, lines, firsts, alignments, occurrences=occurrences)
    first_ids = tokenizer.encode_tgt(list(firsts)) if place else [[] for _ in firsts]
    for line_terms, first, own, ids in zip(matched, firsts, found, first_ids):
        own = [(term, word, at) for term, word, at in own if not occurs_any(terms.targets(term), word)]
        extra = [(t, alone[t.source]) for t in line_terms if alone and alone.get(t.source)]
        mine = [word for _, word, _ in own] + [w for t, w in extra if not occurs_any(terms.targets(t), w)]
        words = [w for word in mine
                 for w in (word, *by_lemma.get(lemma(word).casefold() if lemma else "", ()))]
        variants = both_cases(words)
        avoid = [seq for seq in tokenizer.encode_tgt(variants) if UNK_ID not in seq] if variants else []
        wanted = terms.wanted(line_terms, avoid)
        if own and ids:  # the first word the model gave a term, where it first stands in its translation
            words = [_bare(w) for w in first.split()]
            at = min(words.index(word) if word in words else at for _, word, at in own)
            starts = [i for i, piece in enumerate(tokenizer.tgt_pieces(ids))
                      if piece.startswith(WORD_START) or i == 0]
            if at < len(starts):
                wanted = wanted._replace(prefix=tuple(ids[:starts[at]]), place=True)
        out.append(wanted)
    return out


def alone_sources(matched: Sequence[Sequence[Term]]) -> list[str]:
    """The source sides of the terms found in some lines (`matched`: each line's), each once: what
    "swap" and "both" translate alone."""
    return list(dict.fromkeys(t.source for line_terms in matched for t in line_terms))


def alone_decode(decode: DecodeConfig) -> DecodeConfig:
    """How "swap" translates the source terms alone: beam search with an n-best of at least
    `ALONE_NBEST` (the several words a model has for one term)."""
    k = max(decode.search.beam, ALONE_NBEST)
    return dataclasses.replace(decode, search=dataclasses.replace(decode.search, beam=k, n_best=k,
                                                                  sampling=False))


def alone_word_sets(terms: TermConstraints, sources: Sequence[str], outputs: Sequence[Sequence[str]],
                    align: Align) -> dict[str, tuple[str, ...]]:
    """Source term -> the words the model wrote for it in each of its n-best translations alone
    (`outputs`: one list per source; `alone_words` of each), best first, each once."""
    flat = [(source, output) for source, nbest in zip(sources, outputs) for output in nbest]
    owns = own_words(terms.glossary, [s for s, _ in flat], [o for _, o in flat],
                     alone_alignments([s for s, _ in flat], [o for _, o in flat], align), last=True)
    found: dict[str, list[str]] = {}
    for (source, _), own in zip(flat, owns):
        if own:
            found.setdefault(source, []).append(own[0][1])
    return {source: tuple(dict.fromkeys(ws)) for source, ws in found.items()}


# mt.decode.align.align_words of (sources, targets)
Align = Callable[[list[str], list[str]], "list[list[int]] | None"]


def swapping(terms: TermConstraints, lines: Sequence[str], firsts: Sequence[str], tokenizer: Tokenizer,
             alone: dict[str, tuple[str, ...]], align: Align,
             occurrences: Sequence[Occurrences] | None = None) -> tuple[list[Wanted], list[Choices]]:
    """(the constraints of `lines`, each one's outputs to choose from: `Choices`, () where it is
    searched). The outputs, where the first translation `firsts` (the search's own output) can take
    every term: that translation with each word that is the
    model's own for a term replaced by each of the term's forms (`TermConstraints.targets`; the
    model's score picks "Kerle" for "Männer"), the punctuation around it kept, capitalised where it
    opens the sentence. The model's own word: every word of the output with the lemma of one of the
    words it gives the source term translated alone (`alone`: its n-best, `alone_word_sets`: "Mann"
    for "man"; "bicycle" and "bike" for "Fahrrad"), else of the word aligned with the term
    (`own_words`), if that is not the output's first word, starts in the term's initial case and
    is longer than an article (`MIN_ALIGNED`). A first translation holding every term is its one
    choice. A line where a missing term has no such word gets `replacing`'s constraints (the
    constrained search), as every line does in a language written without spaces (its "words"
    are whole clauses). `align` runs only for the lines whose words the lemmas do not find.
    Nothing else of the first translation changes. `occurrences`: each line's terms, when the
    caller has them (`TermConstraints.occurrences`)."""
    occurrences = terms.occurrences(lines) if occurrences is None else occurrences
    firsts_alone = {source: words[0] for source, words in alone.items() if words}
    if terms.language.split("-")[0].lower() in UNSPACED:
        return replacing(terms, lines, firsts, align(list(lines), list(firsts)) or [[] for _ in lines],
                         tokenizer, firsts_alone, occurrences), [() for _ in lines]
    lemma = lemmatizer(terms.language) if terms.language else None

    def key(word: str) -> str:
        return (lemma(word) if lemma is not None else word).casefold() if word else ""

    keys = [[key(_bare(word)) for word in first.split()] for first in firsts]
    matched = [terms_in(found) for found in occurrences]
    found = [[(term, {key(w) for w in alone.get(term.source, ())} - {""}) for term in line_terms
              if not occurs_any(terms.targets(term), first)] for line_terms, first in zip(matched, firsts)]
    need = [i for i, missing in enumerate(found) if any(not usual & set(keys[i]) for _, usual in missing)]
    aligned = (
        dict(zip(need, align([lines[i] for i in need], [firsts[i] for i in need]) or [])) if need else {}
    )
    owns = dict(zip(need, own_words(terms.glossary, [lines[i] for i in need], [firsts[i] for i in need],
                                    [aligned.get(i, []) for i in need],
                                    occurrences=[occurrences[i] for i in need])))
    texts: list[list[str]] = []
    for i, (first, missing) in enumerate(zip(firsts, found)):
        slots: dict[int, Slot] = {}
        for term, usual in missing:
            slot = _slot_forms(terms, term, lines[i], occurrences[i])
            if not usual & set(keys[i]):  # the word aligned with the term instead
                case = term.target[:1].isupper()
                usual = {key(w) for t, w, at in owns.get(i, [])
                         if t == term and at > 0 and w[:1].isupper() == case and len(w) >= MIN_ALIGNED}
            for at, k in enumerate(keys[i]):
                if k in usual:
                    slots.setdefault(at, (_bare(first.split()[at]), *slot))
        texts.append([t for t in _swapped(first, slots, terms.language)
                      if all(occurs_any(terms.targets(term), t) for term in matched[i])])
    pieces = iter(tokenizer.encode_tgt([t for held in texts for t in held]))  # one call for every line
    wanted, choices = [], []
    for i, (line, first, held) in enumerate(zip(lines, firsts, texts)):
        choices.append(tuple(tuple(next(pieces)) for _ in held))
        wanted.append(terms.wanted(matched[i]) if held else
                      replacing(terms, [line], [first], [aligned.get(i, [])], tokenizer, firsts_alone,
                                [occurrences[i]])[0])
    return wanted, choices


def agreeing(terms: TermConstraints, lines: Sequence[str], outputs: Sequence[str], tokenizer: Tokenizer,
             occurrences: Sequence[Occurrences]) -> list[Choices]:
    """The outputs of the constrained search (`outputs`, one per line of `lines`) offered again with
    each term form whose grammar the glossary gives put in agreement: the form of the source word's
    number in its place, the determiner and adjectives in front rewritten for it (`_swapped`), for
    the choice stage to rank (a constrained search writes the article before it reaches the term:
    "Ein Personen"). () for a line with nothing to offer but its output."""
    offers: list[list[str]] = []
    for line, output, found in zip(lines, outputs, occurrences):
        words = [_bare(word) for word in output.split()]
        slots: dict[int, Slot] = {}
        for term in terms_in(found):
            if term.grammar:
                forms, grammar = _slot_forms(terms, term, line, found)
                for at, word in enumerate(words):
                    if word in terms.targets(term):
                        slots.setdefault(at, (word, forms, grammar))
        held = [t for t in _swapped(output, slots, terms.language)
                if all(occurs_any(terms.targets(term), t) for term in terms_in(found))] if slots else []
        offers.append(held if held != [output] else [])
    pieces = iter(tokenizer.encode_tgt([t for held in offers for t in held]))
    return [tuple(tuple(next(pieces)) for _ in held) for held in offers]


@dataclass(frozen=True)
class PassSearch:
    """One search a glossary's first pass asks the engine for: `lines` with `decode`, `n_best` as
    `Engine.search_ids` reads it (None: each line's one best output)."""

    lines: list[str]
    decode: DecodeConfig
    n_best: int | None = None


def first_pass_searches(terms: TermConstraints, held: Sequence[str], occurrences: Sequence[Occurrences],
                        decode: DecodeConfig) -> list[PassSearch]:
    """The searches `first_pass_wanted` reads for the lines `held` (each holding a term;
    `occurrences`: each one's, `TermConstraints.occurrences`): with "swap", the request's own search
    of the lines and the source terms alone in their n-best (`alone_decode`); none with "off"."""
    if terms.first_pass != "swap":
        return []
    many = alone_decode(decode)
    one = dataclasses.replace(decode, search=dataclasses.replace(decode.search, n_best=1))
    return [PassSearch(list(held), one),
            PassSearch(alone_sources([terms_in(found) for found in occurrences]), many, many.search.n_best)]


def first_pass_wanted(terms: TermConstraints, held: Sequence[str], occurrences: Sequence[Occurrences],
                      outputs: Sequence[Sequence[Sequence[str]]], tokenizer: Tokenizer, align: Align,
                      ) -> tuple[list[Wanted], list[Choices]]:
    """The constraints of `held` and the outputs to choose from after the first pass: `outputs`
    holds, for each of `first_pass_searches`' searches ("swap"), each line's outputs best first:
    `swapping`'s (alignment only where the lemmas miss). The constrain stage of the one translation
    path (`mt.decode.pipeline.constrain`) calls it for every caller."""
    firsts = [hyps[0] for hyps in outputs[0]]
    alone = alone_word_sets(
        terms, alone_sources([terms_in(found) for found in occurrences]), outputs[1], align
    )
    return swapping(terms, held, firsts, tokenizer, alone, align, occurrences)


def alone_alignments(sources: Sequence[str], outputs: Sequence[str], align: Align) -> list[list[int]]:
    """`align(sources, outputs)` for terms translated alone, without running the model for a
    one-word source term: every word of its translation translates that word."""
    many = [i for i, source in enumerate(sources) if len(source.split()) > 1]
    found = (
        dict(zip(many, align([sources[i] for i in many], [outputs[i] for i in many]) or [])) if many else {}
    )
    return [found.get(i, [0] * len(output.split())) for i, output in enumerate(outputs)]


def _slot_forms(terms: TermConstraints, term: Term, line: str,
                occurrences: Occurrences) -> tuple[tuple[str, ...], tuple[Grammar, ...]]:
    """The forms of `term` a swap in `line` offers, with their grammar (() where the glossary gives
    none): where it does, only the forms of the number the source word has (`source_number`: a
    plural "men" gets "Personen", never "Person")."""
    forms = terms.targets(term)
    if not term.grammar:
        return forms, ()
    grammar = [term.grammar_of(form) for form in forms]
    said = [line[begin:end].split()[-1] for found, begin, end in occurrences
            if found == term and line[begin:end].split()]
    keep = following_number(grammar, source_number(said, terms.glossary.language))
    return tuple(forms[k] for k in keep), tuple(grammar[k] for k in keep)


# A slot of `_swapped`: the model's own word, the term's forms to put there, their grammar (() unknown)
Slot = tuple[str, tuple[str, ...], tuple[Grammar, ...]]


def _swapped(first: str, slots: dict[int, Slot], language: str = "") -> list[str]:
    """`first` with the word at each slot's index of `first.split()` (its bare form `word`) replaced
    by each combination of the slots' forms, at most `MAX_CHOICES`; [first] without a slot. Where
    a form's grammar is known, the determiner and adjectives in front of it are rewritten to agree
    with it, in each case they could be (`mt.text.agreement.phrase_variants`: "Ein Person" ->
    "Eine Person"); words in front of another slot or holding punctuation are left as written."""
    spans = [m.span() for m in re.finditer(r"\S+", first)]
    tokens = first.split()
    options = []
    after = 0  # the first word a slot's phrase may start at: after the previous slot
    for at, (word, forms, grammar) in sorted(slots.items()):
        begin, end = spans[at]
        cut = tokens[at].find(word)
        before: list[str] = []
        for k in range(at - 1, after - 1, -1):  # the bare words just in front of the slot
            if _bare(tokens[k]) != tokens[k]:
                break
            before.insert(0, tokens[k])
        chosen: dict[tuple[int, str], None] = {}
        for form, known in itertools.zip_longest(forms, grammar[:len(forms)], fillvalue=UNKNOWN):
            written = first[begin:begin + cut] + _case_like(form, word, at == 0)
            start, variants = phrase_variants(before, known, language) if known != UNKNOWN else (0, [])
            if not variants:
                chosen[(begin, written)] = None
            for variant in variants:  # the phrase's words, then the form
                opens = at - len(before) + start
                chosen[(spans[opens][0], " ".join((*variant, written)))] = None
        options.append([(b, begin + cut + len(word), text) for b, text in chosen])
        after = at + 1
    texts = []
    for combination in itertools.islice(itertools.product(*options), MAX_CHOICES):
        text = first
        for begin, end, form in sorted(combination, reverse=True):  # from the right: earlier offsets hold
            text = text[:begin] + form + text[end:]
        texts.append(text)
    return texts


def _case_like(form: str, word: str, opens: bool) -> str:
    """A term's `form` in the case the model wrote its own `word` in: ALL CAPS as it, a capital
    first letter where the word opens the sentence; else as the glossary writes it."""
    if len(word) > 1 and word.isupper():
        return form.upper()
    if opens and word[:1].isupper():
        return form[:1].upper() + form[1:]
    return form
