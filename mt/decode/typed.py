"""A translator's typed target prefix (issue 73): what the output must start with, as a search's
constraint (`Typed.wanted`), and the output written back as typed (`Typed.continued`).

The prefix is continued by string, not by token boundary. Its complete words (everything up to
its last space) are encoded and forced piece by piece (`Wanted.prefix`). What follows, the word
being typed (or, after a trailing space, the start of the next word), is `rest`: text in the
pieces' own spelling ('▁' for a space) that the next pieces must spell out, whatever pieces the
model picks for it. `Wanted.partial` says which pieces may come at each character of `rest`:
a piece whose text starts with the rest of it (it finishes the word being typed and may go on),
or one that is a prefix of the rest of it (the next piece goes on from where it stops). The
search turns that into a mask over the vocabulary at each step (`mt.decode.partial`,
`mt.decode.rules.apply_rules` rule 10). "Ein Mann fä" forces the pieces of "Ein Mann" and then
lets "▁fährt", "▁fä|hrt" or "▁f|ä|hrt" come, never "▁fuhr".

The output text then starts with the normalised prefix (`shown`); the typed text replaces it, so
the translator's own case and spaces stay.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from mt.data.tokenizer import EOS_ID, UNK_ID, Tokenizer
from mt.decode.wanted import Wanted
from mt.errors import MTError

SPACE = "\u2581"  # sentencepiece's word-start mark
LAST = "\U0010ffff"
PUNCTUATION = ".,;:!?\"')]}»«“”„…"  # not part of a word (alternatives are distinct words)


@dataclass(frozen=True)
class Typed:
    """One typed target prefix: `text` as typed, `prefix` the forced pieces of its complete words,
    `rest` the text (pieces' spelling) the next pieces spell, `partial` the pieces allowed at each
    character of `rest` with their lengths (`Wanted.partial`), `shown` what the detokenised output
    starts with in place of `text`."""

    text: str
    prefix: tuple[int, ...]
    rest: str
    partial: tuple[tuple[tuple[int, int], ...], ...]
    shown: str

    @property
    def pieces(self) -> int:
        """Output positions the prefix takes at most (its forced pieces and one a character of `rest`)."""
        return len(self.prefix) + len(self.rest)

    def wanted(self) -> Wanted:
        """The search's constraint: the forced pieces, then the partial word."""
        return Wanted((), prefix=self.prefix, partial=self.partial)

    def continued(self, output: str) -> str:
        """`output` (a detokenised translation that continues the prefix) with the typed text in place
        of its start: the typed case and spaces, then the model's continuation."""
        n = len(self.shown)
        if output[:n].casefold() != self.shown.casefold():  # the render stage changed the start
            n = min(n, len(output))
        return self.text + output[n:]


@functools.lru_cache(maxsize=8)
def _vocabulary(tokenizer: Tokenizer) -> tuple[list[str], list[int]]:
    """The target vocabulary's pieces sorted (and their ids), special pieces left out."""
    pieces = tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size)))
    found = sorted((p, i) for i, p in enumerate(pieces) if i > EOS_ID and p)
    return [p for p, _ in found], [i for _, i in found]


def allowed_pieces(tokenizer: Tokenizer, rest: str) -> tuple[tuple[tuple[int, int], ...], ...]:
    """For each character o of `rest`, the (piece id, piece length) of every piece that may come
    there: its text starts with rest[o:], or is a prefix of it."""
    words, ids = _vocabulary(tokenizer)
    out = []
    for o in range(len(rest)):
        tail = rest[o:]
        lo, hi = bisect.bisect_left(words, tail), bisect.bisect_right(words, tail + LAST)
        found = {ids[j]: len(words[j]) for j in range(lo, hi)}
        for end in range(1, len(tail)):
            j = bisect.bisect_left(words, tail[:end])
            if j < len(words) and words[j] == tail[:end]:
                found[ids[j]] = end
        out.append(tuple(sorted(found.items())))
    return tuple(out)


def typed_prefix(tokenizer: Tokenizer, text: str, *, line: int = 0) -> Typed | None:
    """`text` as a `Typed` prefix, or None for an empty (or blank) one: the plain translation.
    A prefix the target vocabulary cannot spell is an MTError naming input line `line` (1-based)."""
    body = text.strip()
    if not body:
        return None
    if text[-1].isspace():
        words, word = body, ""
    else:
        cut = max(body.rfind(" "), body.rfind("\t"))
        words, word = body[:cut].rstrip() if cut >= 0 else "", body[cut + 1:]
    forced = tokenizer.encode_tgt([words])[0] if words else []
    typed = tokenizer.encode_tgt([word])[0] if word else []
    if UNK_ID in forced or UNK_ID in typed:
        raise MTError(f"prefix on line {line}: characters the model's target vocabulary cannot write "
                      f"({text.strip()[:40]!r})")
    rest = "".join(tokenizer.tgt_pieces(typed)) if word else SPACE
    partial = allowed_pieces(tokenizer, rest)
    if not partial[0]:
        raise MTError(f"prefix on line {line}: the model cannot write {word!r}")
    spelled = tokenizer.decode_tgt([forced])[0] if forced else ""
    shown = (spelled + rest.replace(SPACE, " ")).lstrip(" ")
    return Typed(text, tuple(forced), rest, partial, shown)


def typed_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str], max_positions: int) -> list[Typed | None]:
    """Each text's prefix (`typed_prefix`); one longer than the model's positions is an MTError."""
    out = [typed_prefix(tokenizer, text, line=i + 1) for i, text in enumerate(prefixes)]
    for i, typed in enumerate(out):
        if typed is not None and typed.pieces >= max_positions - 1:
            raise MTError(f"prefix on line {i + 1}: up to {typed.pieces} pieces, over the model's limit of "
                          f"{max_positions - 2} (model.max_positions={max_positions})")
    return out


EMPTY = Typed("", (), "", (), "")  # no prefix: alternatives for the first word


def extended(tokenizer: Tokenizer, typed: Typed, piece: int) -> Typed:
    """`typed` with `piece` forced after its complete words: an alternative's first piece (one the
    typed word allows), the rest of the typed word, if any, still to spell after it."""
    spelled = tokenizer.tgt_pieces([piece])[0]
    rest = typed.rest[len(spelled):] if len(spelled) < len(typed.rest) else ""
    return Typed(typed.text, (*typed.prefix, piece), rest, allowed_pieces(tokenizer, rest), typed.shown)


def word_at(typed: Typed, text: str) -> str:
    """The word of `text` (a translation continuing `typed`) that the prefix's end is in or before,
    without the punctuation after it."""
    begin = len(typed.text) if not typed.text or typed.text[-1].isspace() else typed.text.rfind(" ") + 1
    while begin < len(text) and text[begin].isspace():
        begin += 1
    end = text.find(" ", max(begin, len(typed.text)))
    return text[begin:end if end >= 0 else len(text)].rstrip(PUNCTUATION)
