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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mt.data.tokenizer import UNK_ID, Tokenizer
from mt.decode.engine import Engine
from mt.errors import MTError
from mt.text.glossary import Glossary, Term

UNSPACED = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo"})  # languages written without spaces between words


@dataclass(frozen=True)
class TermConstraints:
    """A checked glossary and each of its target terms' pieces."""

    glossary: Glossary
    pieces: dict[str, list[int]]  # target term -> its target piece ids
    glue: tuple[int, ...] = ()  # target pieces that may not follow a term (they would continue its last word)

    def terms_of(self, lines: Sequence[str]) -> list[list[Term]]:
        """The glossary's terms found in each line (`Glossary.match`)."""
        return [self.glossary.match(line) for line in lines]

    def for_lines(self, lines: Sequence[str]) -> list[list[list[int]]]:
        """Each line's constraints: the pieces of the target terms of the terms found in it, each
        target once (two source terms with one target are one constraint)."""
        return [[self.pieces[t] for t in dict.fromkeys(term.target for term in terms)] for terms in self.terms_of(lines)]


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


def term_constraints(glossary: Glossary, tokenizer: Tokenizer, engine: Engine, *,
                     target_lang: str = "", glue: tuple[int, ...] | None = None,
                     where: Callable[[Term], str] | None = None) -> TermConstraints:
    """`glossary` checked against the model behind `engine`, which translates into `target_lang`
    (see the module docstring). `glue`: `glue_pieces` of that tokenizer and language when the
    caller has them already (a server computes them once per model); `where(term)`: how an error
    names a term (default `glossary FILE:LINE`)."""
    refuse_unless_constrains(engine)
    where = where or (lambda term: f"glossary {glossary.name}:{term.line}")
    limit = engine.max_positions - 1  # a source gets an EOS, an output a BOS
    terms = glossary.terms
    targets = tokenizer.encode_tgt([t.target for t in terms])
    sources = tokenizer.encode_src([t.source for t in terms])
    prefix = len(tokenizer.src_prefix) if hasattr(tokenizer, "src_prefix") else 0  # a multi-pair model's tag
    for term, target, source in zip(terms, targets, sources):
        at = where(term)
        if len(source) - prefix > limit:
            raise MTError(f"{at}: source term '{term.source}' is {len(source) - prefix} pieces; the model reads "
                          f"at most {limit} (model.max_positions={limit + 1})")
        if len(target) > limit:
            raise MTError(f"{at}: target term '{term.target}' is {len(target)} pieces; the model writes at most "
                          f"{limit} (model.max_positions={limit + 1})")
        if UNK_ID in target:
            raise MTError(f"{at}: target term '{term.target}' has characters the model's vocabulary lacks "
                          "(they would be <unk>)")
    return TermConstraints(glossary, {t.target: ids for t, ids in zip(terms, targets)},
                           (glue_pieces(tokenizer, target_lang) if glue is None else glue) if terms else ())
