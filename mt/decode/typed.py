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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mt.data.tokenizer import EOS_ID, UNK_ID, Tokenizer
from mt.decode.terms import TermConstraints
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.text.case import Count, case_style, sentence_case
from mt.text.glossary import Term
from mt.text.protect import Prepared
from mt.text.segment import Segmented, Segmenter

SPACE = "\u2581"  # sentencepiece's word-start mark
LAST = "\U0010ffff"
PUNCTUATION = ".,;:!?\"')]}»«“”„…"  # not part of a word (alternatives are distinct words)
BYTE_PIECE = re.compile(r"^<0x[0-9A-F]{2}>$")  # sentencepiece's byte-fallback pieces


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

    def continued(self, output: str, spans: Sequence[str] = ()) -> str:
        """`output` (a detokenised translation that continues the prefix) with the typed text in place
        of its start: the typed case and spaces, then the model's continuation. `spans`: the
        segment's protected spans (put back by render); one the translator typed is not kept twice."""
        for span in spans:
            at = output.find(span) if span in self.text else -1
            if at >= 0:
                output = (output[:at].rstrip(" ") + " " + output[at + len(span):].lstrip(" ")).lstrip(" ")
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


def typed_prefix(tokenizer: Tokenizer, text: str, *, line: int = 0,
                 spelled: str | None = None) -> Typed | None:
    """`text` as a `Typed` prefix, or None for an empty (or blank) one: the plain translation.
    `spelled`: the text the model is to write for it (`model_side`; default `text` itself).
    A prefix the target vocabulary cannot spell is an MTError naming input line `line` (1-based)."""
    as_typed, text = text, spelled if spelled is not None else text
    body = text.strip()
    if not as_typed.strip():
        return None
    if not body:
        return Typed(as_typed, (), "", (), "")
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
    if spelled is not None and spelled != as_typed and word:  # re-cased (`model_side`): either first letter
        flipped = {rest[:1] + rest[1:2].swapcase() + rest[2:]} - {rest}
        variants = [allowed_pieces(tokenizer, v) for v in flipped]
        partial = tuple(tuple(sorted(set().union(*steps))) for steps in zip(partial, *variants))
    if not partial[0]:
        raise MTError(f"prefix on line {line}: the model cannot write {word!r}")
    spelled = tokenizer.decode_tgt([forced])[0] if forced else ""
    shown = (spelled + rest.replace(SPACE, " ")).lstrip(" ")
    return Typed(as_typed, tuple(forced), rest, partial, shown)


def typed_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str], max_positions: int,
                   lines: Sequence[int] | None = None,
                   spelled: Sequence[str] | None = None) -> list[Typed | None]:
    """Each text's prefix (`typed_prefix`, `spelled` as the model writes each); one longer than the
    model's positions, or holding another script's letters (`foreign_letters`), is an MTError.
    `lines`: each prefix's input line (0-based) for the error; by default its index."""
    at = list(lines) if lines is not None else list(range(len(prefixes)))
    for i, text in enumerate(prefixes):
        foreign = foreign_letters(tokenizer, text)
        if foreign:
            raise MTError(f"prefix on line {at[i] + 1}: {foreign_message(foreign)}")
    out = [typed_prefix(tokenizer, text, line=at[i] + 1, spelled=spelled[i] if spelled is not None else None)
           for i, text in enumerate(prefixes)]
    for i, typed in enumerate(out):
        if typed is not None and typed.pieces >= max_positions - 1:
            raise MTError(f"prefix on line {at[i] + 1}: up to {typed.pieces} pieces, over the model's limit "
                          f"of {max_positions - 2} (model.max_positions={max_positions})")
    return out


def foreign_letters(tokenizer: Tokenizer, text: str) -> list[str]:
    """The letters of `text` (each once) the target vocabulary has no piece for: written only as
    UTF-8 byte pieces (`tokenizer.byte_fallback`) or as <unk>, they are another script than the
    model writes, which it would not continue. Symbols, digits and emoji are not letters: they pass."""
    chars = list(dict.fromkeys(c for c in text if c.isalpha()))
    if not chars:
        return []
    return [c for c, ids in zip(chars, tokenizer.encode_tgt(chars))
            if any(BYTE_PIECE.match(p) or i == UNK_ID for i, p in zip(ids, tokenizer.tgt_pieces(ids)))]


def foreign_message(foreign: Sequence[str]) -> str:
    """What is wrong with a prefix holding the letters `foreign` (`foreign_letters`), in words."""
    shown = "".join(foreign[:12]) + ("..." if len(foreign) > 12 else "")
    return (f"{len(foreign)} letter{'s' * (len(foreign) > 1)} the model's target vocabulary has no piece "
            f"for ({shown!r}): another script than it writes?")


@dataclass(frozen=True)
class Part:
    """A typed prefix's share of one source segment: `text` as typed ('' for none: the plain
    translation); `whole`: a sentence the translator finished (the segment's translation is `text`
    itself, not searched), `gap` the whitespace typed after it."""

    text: str
    whole: bool = False
    gap: str = ""


def split_prefix(prefix: str, segments: int, sentences: Callable[[str], list[str]]) -> list[Part]:
    """`prefix` shared out over a text's `segments` source sentences. It belongs to the first one
    unless it holds a sentence end followed by more text: then it is split where the target's
    segmenter (`sentences`, whitespace attached) splits it, each finished sentence the translation
    of one source sentence, the last (unfinished) part the prefix of the next; the sentences beyond
    the prefix's reach get none. A prefix ending in a finished sentence and a space (`"Rad. "`) has
    finished that sentence too (the segmenter is asked with a letter after it). More typed
    sentences than source sentences: the last source sentence takes the rest."""
    out = [Part("") for _ in range(segments)]
    if not prefix.strip() or not segments:
        return out
    probe = prefix[-1].isspace()
    parts = sentences(prefix + "X") if probe else sentences(prefix)
    finished = probe and len(parts) > 1 and parts[-1] == "X"
    if finished:
        parts = parts[:-1]
    elif probe:
        parts[-1] = parts[-1][:-1]
    if len(parts) > segments:
        parts = [*parts[:segments - 1], "".join(parts[segments - 1:])]
    for i, part in enumerate(parts):
        if i < len(parts) - 1 or finished:
            body = part.rstrip()
            out[i] = Part(body, True, part[len(body):])
        else:
            out[i] = Part(part)
    return out


def spread_prefixes(texts: Sequence[Segmented], prefixes: Sequence[str], segmenter: Segmenter | None,
                    ) -> tuple[list[Segmented], list[Part]]:
    """Each text's prefix shared out over its segments (`split_prefix`, by the target language's
    segmenter; without a segmenter the whole prefix is the first segment's): (the texts, the gap
    after each finished sentence the whitespace typed after it where the source's has no line
    break; every segment's `Part`, in order)."""
    target = Segmenter(segmenter.target or segmenter.lang) if segmenter is not None else None
    sentences = target.sentences if target is not None else (lambda text: [text])
    out_texts, out_parts = [], []
    for text, prefix in zip(texts, prefixes):
        parts = split_prefix(prefix, len(text.segments), sentences)
        gaps = list(text.gaps)
        for i, part in enumerate(parts):
            if part.whole and "\n" not in gaps[i + 1]:
                gaps[i + 1] = part.gap
        out_texts.append(replace(text, gaps=tuple(gaps)))
        out_parts += parts
    return out_texts, out_parts


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


def holds(text: str, form: str) -> bool:
    """Whether `text` (a typed prefix) has `form` (a glossary term's target form) as whole words,
    case aside."""
    at, low, part = 0, text.casefold(), form.casefold()
    while (at := low.find(part, at)) >= 0:
        end = at + len(part)
        if (at == 0 or not low[at - 1].isalnum()) and (end == len(low) or not low[end].isalnum()):
            return True
        at += 1
    return False


def typed_terms(terms: TermConstraints, found: Sequence[Term], typed: Typed) -> Wanted:
    """A segment's constraints when it continues `typed` and holds the glossary terms `found`: the
    prefix (`Typed.wanted`), then every term the translator has not already typed (in any of its
    forms) required in the continuation; the words terms replace avoided after the prefix."""
    missing = [t for t in found if not any(holds(typed.text, form) for form in terms.targets(t))]
    return terms.wanted(missing)._replace(prefix=typed.prefix, partial=typed.partial)


def typed_marks(tokenizer: Tokenizer, texts: Sequence[Segmented], parts: Sequence[Part],
                prepared: Sequence[Prepared], max_positions: int) -> list[tuple[Typed | None, str | None]]:
    """Each segment's (typed prefix to continue, as the model writes it: `model_side`; or None,
    its translation as typed when the translator finished it or None)."""
    owner = [i for i, text in enumerate(texts) for _ in text.segments]
    count = functools.partial(_target_pieces, tokenizer)
    spelled = [model_side(p.text, made, count) for p, made in zip(parts, prepared)]
    marks = typed_prefixes(tokenizer, [p.text for p in parts], max_positions, lines=owner, spelled=spelled)
    return [(mark, part.text if part.whole else None) for mark, part in zip(marks, parts)]


def _target_pieces(tokenizer: Tokenizer, words: list[str]) -> list[int]:
    return [len(ids) for ids in tokenizer.encode_tgt(words)] if words else []


def model_side(text: str, prepared: Prepared, count: Count) -> str:
    """A typed prefix as the model writes it for its segment (`prepared`): the protected spans the
    source holds taken out, as the source's were (render puts them back); typed in the source's
    case style (ALL CAPS, Title Case), in the sentence case the model spells best (`sentence_case`,
    as the source was). Spaces at its end kept (they say a word is finished)."""
    for span in prepared.spans:
        text = re.sub(r" {2,}", " ", text.replace(span.text, "", 1)) if span.text in text else text
    if prepared.style != "none" and case_style(text.split()) == prepared.style:
        text = " ".join(sentence_case(text.split(" "), prepared.style, count))
    return text


def open_segments(texts: Sequence[Segmented], whole: Sequence[str | None]) -> list[int]:
    """The index of each text's first segment not typed whole (`whole[i]` None): where its prefix
    ends, the alternatives' place; a text typed whole has none."""
    out, at = [], 0
    for n in (len(text.segments) for text in texts):
        out += [i for i in range(at, at + n) if whole[i] is None][:1]
        at += n
    return out
