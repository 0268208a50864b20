"""A glossary (mt.text.glossary) as decoding constraints for one model.

`term_constraints` checks the glossary against the model once, before anything is translated,
and refuses it whole in one line naming `file:line`: a term longer than the model's positions
(in pieces), a target term its vocabulary cannot write (pieces that would be <unk>), or an
engine that cannot constrain its search (an exported CTranslate2 model). `TermConstraints.for_lines`
then gives each source sentence the target pieces of the terms found in it.

A target term is encoded as it stands inside a sentence: sentencepiece puts the word-boundary
mark '▁' before a line's first piece, as before every word after a space, so `encode_tgt([term])`
gives the pieces the term has after a space mid-sentence (and at the start of the output).
In a target language written with spaces, the term also ends a word: `glue` holds the pieces that
would continue it (a letter or digit without '▁'), which the search bars right after a term.

**Forms.** A term is kept by any of its target forms (a disjunctive constraint,
`mt.decode.constrained.Wanted`): the forms its glossary line lists; for a line that lists one,
where simplemma knows the target language, also every word of the target vocabulary whose lemma
is the term ("Damen" for "Dame": `vocabulary_forms`). The model's score picks the form the
sentence needs.

**Replacing the model's word** (the glossary's first pass, "swap"): mt.decode.swap.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mt.data.tokenizer import UNK_ID, Tokenizer
from mt.decode.engine import Engine
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.text.glossary import Glossary, Term
from mt.text.lemma import lemmatizer

Occurrences = list[tuple[Term, int, int]]  # a line's term occurrences with their spans (`Glossary.find`)
WORD_START = "\u2581"  # sentencepiece's word-boundary mark
# A first, unconstrained translation of a sentence with a term: "off" (none: the term is only
# required; what mt evaluate's term scores and the experiments compare against), "swap": the first
# translation is the search's own (beam) output, and each term is put in the place of the model's
# word, in the form the model scores best (`swapping`); a line where that cannot be done (no such
# word) takes the constrained search, the model's words avoided (`replacing`).
FIRST_PASS = ("off", "swap")
# languages written without spaces between words
UNSPACED = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo"})


@dataclass(frozen=True)
class TermConstraints:
    """A checked glossary and each of its target forms' pieces."""

    glossary: Glossary
    pieces: dict[str, list[int]]  # target form (or avoided word) -> its target piece ids
    # target pieces that may not follow a term (they would continue its last word)
    glue: tuple[int, ...] = ()
    # a term's forms (default: `Term.targets`)
    forms: dict[Term, tuple[str, ...]] = field(default_factory=dict)
    # what a first, unconstrained pass is for (FIRST_PASS; `term_constraints` says "swap")
    first_pass: str = "off"
    language: str = ""  # the target language (its lemmas widen the avoided words to their forms)

    def targets(self, term: Term) -> tuple[str, ...]:
        """The target forms that keep `term` (its glossary forms and those the vocabulary attests)."""
        return self.forms.get(term, term.targets)

    def terms_of(self, lines: Sequence[str]) -> list[list[Term]]:
        """The glossary's terms found in each line (`Glossary.match`)."""
        return [self.glossary.match(line) for line in lines]

    def occurrences(self, lines: Sequence[str]) -> list[Occurrences]:
        """Every term occurrence in each line, with its span (`Glossary.find`): the one match of a
        line, which the constrain stage carries on (`terms_in` gives `terms_of`'s terms from it)."""
        return [self.glossary.find(line) for line in lines]

    def wanted(self, terms: Sequence[Term], avoid: Sequence[Sequence[int]] = ()) -> Wanted:
        """The constraints of a line holding `terms`: one per distinct set of target forms, each
        form an alternative; the terms' deprecated words (both initial cases) and `avoid` (piece
        sequences) to be avoided."""
        groups = dict.fromkeys(self.targets(term) for term in terms)
        words = [w for w in both_cases([w for term in terms for w in term.avoid]) if w in self.pieces]
        banned = dict.fromkeys([*(tuple(self.pieces[w]) for w in words), *map(tuple, avoid)])
        return Wanted(
            tuple(tuple(tuple(self.pieces[form]) for form in forms) for forms in groups), tuple(banned)
        )

    def for_lines(self, lines: Sequence[str]) -> list[Wanted]:
        """Each line's constraints (`wanted`); falsy for a line without a term."""
        return [self.wanted(terms) for terms in self.terms_of(lines)]


def refuse_unless_constrains(engine: Engine) -> None:
    """MTError in one line when `engine` cannot keep a glossary's terms (it would drop them)."""
    if not getattr(engine, "constrains", False):
        raise MTError(getattr(engine, "refusal", f"--glossary: this model ({type(engine).__name__}) cannot "
                                                 "constrain its search to a glossary's terms"))


def glue_pieces(tokenizer: Tokenizer, target_lang: str) -> tuple[int, ...]:
    """Target pieces that continue a word (first character a letter or digit, no '▁'); none for
    a language written without spaces between words."""
    if target_lang.split("-")[0].lower() in UNSPACED:
        return ()
    pieces = tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size)))
    return tuple(i for i, piece in enumerate(pieces) if _continues_word(piece))


def _continues_word(piece: str) -> bool:
    """A piece that, written right after a word, makes it longer: one starting with a letter or
    digit, or a byte piece (tokenizer.byte_fallback: '<0x4F>') of an ASCII letter or digit or of a
    multi-byte character (a letter more often than not)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        byte = int(piece[3:5], 16)
        return byte >= 0x80 or chr(byte).isalnum()
    return piece[:1].isalnum()


_VOCAB_FORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {lang: forms by lemma}


def vocabulary_forms(tokenizer: Tokenizer, target_lang: str) -> dict[str, tuple[str, ...]]:
    """The words of the target vocabulary (pieces with the word-start mark, letters only) by their
    casefolded lemma in `target_lang`; {} where simplemma does not know the language. Computed once
    per tokenizer and language."""
    lemma = lemmatizer(target_lang) if target_lang else None
    if lemma is None:
        return {}
    known = _VOCAB_FORMS.setdefault(tokenizer, {})
    if target_lang not in known:
        found: dict[str, list[str]] = {}
        for piece in tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size))):
            word = piece[1:]
            if piece.startswith(WORD_START) and word.isalpha() and len(word) > 1:
                found.setdefault(lemma(word).casefold(), []).append(word)
        known[target_lang] = {k: tuple(v) for k, v in found.items()}
    return known[target_lang]


def _with_vocabulary(term: Term, by_lemma: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """A term's forms: those its glossary line lists when it lists several (the terminologist's
    word is final: a lemmatiser takes "cycling" for a form of the noun "cycle"), else the term and,
    for a one-word term, the vocabulary's words of its lemma in its case."""
    if term.forms:
        return term.targets
    forms = list(term.targets)
    for form in term.targets:
        if form.isalpha():
            forms += [w for w in by_lemma.get(form.casefold(), ()) if w[:1].isupper() == form[:1].isupper()]
    return tuple(dict.fromkeys(forms))


def term_constraints(glossary: Glossary, tokenizer: Tokenizer, engine: Engine, *,
                     target_lang: str = "", glue: tuple[int, ...] | None = None,
                     where: Callable[[Term], str] | None = None, first_pass: str = "swap") -> TermConstraints:
    """`glossary` checked against the model behind `engine`, which translates into `target_lang`
    (see the module docstring). `glue`: `glue_pieces` of that tokenizer and language when the
    caller has them already (a server computes them once per model); `where(term)`: how an error
    names a term (default `glossary FILE:LINE`); `first_pass`: `TermConstraints.first_pass`."""
    if first_pass not in FIRST_PASS:
        raise ValueError(f"first_pass: expected one of {', '.join(FIRST_PASS)}, got {first_pass!r}")
    refuse_unless_constrains(engine)
    where = where or (lambda term: f"glossary {glossary.name}:{term.line}")
    limit = engine.max_positions - 1  # a source gets an EOS, an output a BOS
    terms = glossary.terms
    by_lemma = vocabulary_forms(tokenizer, target_lang) if terms else {}
    forms = {term: _with_vocabulary(term, by_lemma) for term in terms}
    written = sorted({form for term in terms for form in term.targets})
    pieces = dict(zip(written, tokenizer.encode_tgt(written)))
    sources = tokenizer.encode_src([t.source for t in terms])
    prefix = len(tokenizer.src_prefix) if hasattr(tokenizer, "src_prefix") else 0  # a multi-pair model's tag
    for term, source in zip(terms, sources):
        at = where(term)
        if len(source) - prefix > limit:
            raise MTError(f"{at}: source term '{term.source}' is {len(source) - prefix} pieces; "
                          f"the model reads at most {limit} (model.max_positions={limit + 1})")
        for form in term.targets:
            if len(pieces[form]) > limit:
                raise MTError(f"{at}: target term '{form}' is {len(pieces[form])} pieces; "
                              f"the model writes at most {limit} (model.max_positions={limit + 1})")
            if UNK_ID in pieces[form]:
                raise MTError(f"{at}: target term '{form}' has characters the model's vocabulary lacks "
                              "(they would be <unk>)")
    extra = sorted({w for fs in forms.values() for w in fs} - set(pieces)
                   | {w for term in terms for w in both_cases(term.avoid)} - set(pieces))
    pieces |= {w: ids for w, ids in zip(extra, tokenizer.encode_tgt(extra))
               if UNK_ID not in ids and len(ids) <= limit}
    forms = {term: tuple(f for f in fs if f in pieces) for term, fs in forms.items()}
    return TermConstraints(glossary, pieces, (glue_pieces(tokenizer, target_lang) if glue is None else glue)
                           if terms else (), forms, first_pass, target_lang)


def both_cases(words: Sequence[str]) -> list[str]:
    """Each word as written and with its first letter in the other case (where it matters)."""
    out = []
    for word in words:
        out += [word, word[:1].swapcase() + word[1:]]
    return list(dict.fromkeys(out))


def terms_in(occurrences: Occurrences) -> list[Term]:
    """The terms of a line's occurrences, each once, in order of first match (`Glossary.match`)."""
    return list(dict.fromkeys(term for term, _, _ in occurrences))
