"""Protected spans and case styles at translation time: what software and people send, made into
text the model reads well, and the spans put back verbatim, each exactly once, where the words
around them went. For every model, old checkpoints included: nothing is learnt.

`prepare(segment, kinds, case, count, ending) -> Prepared`: the spans of `kinds` found in one
segment (a sentence from `mt.text.segment`) are taken OUT of the text the model translates
(`Prepared.text`), and an ALL CAPS or Title Case sentence is put in sentence case (`mt.text.case`).
`Prepared.render(translation, alignment)` gives the translation the sentence's case style back and
puts each span between the translated words as inline markup is placed (`mt.text.html`): the
source's text between spans is a row of *slots*, the word alignment (`mt.decode.align`, the
model's cross-attention between `Prepared.text` and the translation) says which slot each
translated word belongs in, `aligned_bounds` (html's dynamic programme) keeps the slots in order,
and a slot's trailing full stop or comma that the source had after the span moves past it
("Write to <x>." -> "Schreiben Sie an <x>."). Without an alignment (an engine with no attention to
read) words are placed in proportion, as html does, and a shouted word's emphasis is not placed.
When a span opens the segment and the source word after it starts lower case, the translated word
placed after it loses the capital the model gave a sentence's first word ("2 blond girls": "2
blonde Mädchen") unless `truecase` (the target vocabulary's answer, `mt.decode.protected`) says the
language writes it capitalised. With `ending`, a *bare* segment (ending in a letter, a digit or a
span: "Save changes", "Visit {url}") gets no full stop the source never had: a single final '.',
'。' or '．' of its translation is dropped ('...', '…', '?', '!' and an abbreviation's 'z.B.' are
kept); the model still reads the segment itself, unaligned. A segment where nothing applies is
`identity`: its text is the segment and `render` returns the translation unchanged, so such a
sentence comes out byte-identical to a translation without this module.

The kinds (`mt.config.ProtectKind`, each switched off by leaving it out of `decode.text.protect`):
- `placeholders`: printf `%s %d %5.2f %1$s %(name)s %@`, `{0} {0:N2} {name} {user.name}` (ICU,
  Python, .NET), `{{ x }}`, `${x}`, `%{x}`, `:name` (Rails, Laravel), `<name>`;
- `urls` (a scheme `x://` or `www.`, trailing sentence punctuation left out), `emails`,
  `handles` (`@name`, fediverse `@name@host`), `hashtags` (`#word`), `numbers` (`3`, `3.5`,
  `1,000`, `10:30`, `2024-01-31`, `50%`), `code` (text in backticks).
A span is found by one regular expression of bounded pieces (no unbounded backtracking: linear
in the text). What matches none of them is text: an unbalanced brace (`{name`), an ICU plural
with nested braces or any style not listed goes to the model as words, never dropped. A segment
that is nothing but spans (and punctuation) is not translated: it comes back as it was. A run of
eight symbols or more (`SYMBOLS`: "[[[[[[[[", "* * * * * * * *") is a span whatever the kinds:
the model never reads it, so a hostile line of symbols costs what its words cost.

With `ending`, a segment that ends in one of `MARKS` (a label's `:`, a menu item's `...` or `…`,
`?`, `!`) gets that mark in place of whatever final punctuation its translation has (`with_mark`:
"Name:" -> "Namen:" where the model wrote "Namen."), as Weblate's and translate-toolkit's
trailing-punctuation checks expect.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import get_args

from mt.config import ProtectKind
from mt.errors import MTError
from mt.text.case import Count, Style, case_style, restyle, sentence_case, shouted
from mt.text.html import MAX_PLACEMENT_WORK, TRAILING_PUNCTUATION, aligned_bounds

KINDS: tuple[ProtectKind, ...] = get_args(ProtectKind)
# The patterns, in the order they are tried at a position (code and addresses before the
# placeholders and numbers inside them). Every repeat is bounded, so a failed try costs O(1).
# A unit written onto its number ("16px", "512KiB", "5ms", "2x"): the quantity is kept whole, as
# pofilter's `numbers` check and a translator keep it ("1990s" and "3rd" are words: not units).
UNITS = r"(?:[KMGTPE]i?B|[kKMGT]?B(?:ps)?|[kKMG]?bps|[kMG]?Hz|px|pt|dp|dpi|ppi|fps|ms|min|mm|cm|km|kg|mg|x|h)"
PATTERNS: dict[str, str] = {
    "code": r"`[^`\n]{1,500}`",
    "urls": r"(?<![\w@.])(?:[A-Za-z][A-Za-z0-9+.-]{0,15}://|www\.)[^\s<>\"`]{1,2000}",
    "emails": r"(?<![\w.+-])[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8}",
    "placeholders": "|".join((
        r"\{\{[^{}\n]{1,200}\}\}", r"[$%]\{[^{}\n]{1,200}\}", r"%%",
        r"%\([\w.-]{1,64}\)[-#0+]{0,4}\d{0,3}(?:\.\d{1,3})?[diouxXeEfFgGcrsa]",
        r"%(?:\d{1,3}\$)?[-#0+']{0,4}(?:\d{1,3}|\*)?(?:\.(?:\d{1,3}|\*))?"
        r"(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcspaA@]",
        r"\{\d{1,3}(?:[,:][^{}\n]{0,40})?\}", r"\{[A-Za-z_][\w.\-]{0,64}(?:[,:!][^{}\n]{0,40})?\}",
        r"<[A-Za-z_][\w.-]{0,64}>", r"(?<![\w:/]):[A-Za-z_]\w{0,64}")),
    "handles": r"(?<![\w@])@[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,8})?",
    "hashtags": r"(?<![\w#&])#[^\W\d_]\w{0,100}",
    "numbers": rf"(?<![\w.,])\d{{1,30}}(?:[.,:/-]\d{{1,30}}){{0,6}}(?:%|{UNITS})?(?!\w)",
}
# A run of symbols (8 or more, single spaces between them allowed: "[[[[...", "* * * * ..."), whatever
# the kinds: copied through as one span, so its cost is none of the model's (a line of 10,000 "["
# costs what its words cost). Tried after the kinds, so a placeholder or URL at the same place wins.
SYMBOLS = r"[^\w\s](?:[^\w\s]|\s(?=[^\w\s])){7,}"
_ALNUM = re.compile(r"[^\W_]")  # `str.isalnum`, as `\w` is it or "_": a long line is scanned in C
_URL_TAIL = ".,;:!?'\")]}"  # punctuation after a URL belongs to the sentence
_AROUND = ".,;:!?'\"«»“”"  # punctuation a sentence puts around a word
# a final full stop the model adds to a segment that had none (not '...', '…', '?', '!')
FULL_STOPS = ".。．"
# The final marks a segment's translation is given from its source (`decode.text.ending`): a label's colon,
# a menu item's ellipsis, a question's or an exclamation's mark. A full stop stays the model's.
MARKS = (":", "...", "…", "?", "!")
_ENDS = ".:;,!?…。．"  # what a translation may end with in place of the source's mark


def parse_kinds(value: str, flag: str = "--protect") -> tuple[ProtectKind, ...]:
    """A `--protect` value: "all", "none", or kinds separated by commas ("urls,emails"), checked
    (a one-line MTError naming the kinds there are)."""
    words = [word.strip().lower() for word in value.split(",") if word.strip()]
    if words == ["all"]:
        return KINDS
    if words in (["none"], []):
        return ()
    unknown = [word for word in words if word not in KINDS]
    if unknown:
        raise MTError(f"{flag}: unknown kind {unknown[0]!r}; "
                      f"expected all, none or some of {', '.join(KINDS)}")
    return tuple(kind for kind in KINDS if kind in words)


@lru_cache(maxsize=64)
def _finder(kinds: tuple[str, ...]) -> re.Pattern[str]:
    order = [kind for kind in PATTERNS if kind in kinds]
    return re.compile("|".join([*(f"(?P<{kind}>{PATTERNS[kind]})" for kind in order),
                                f"(?P<symbols>{SYMBOLS})"]))


def find_spans(text: str, kinds: Sequence[str]) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every protected span of `kinds` in `text`, in order, not overlapping;
    a run of symbols (`SYMBOLS`, kind "symbols") whatever `kinds` says."""
    finder = _finder(tuple(sorted(set(kinds))))
    spans = []
    for match in finder.finditer(text):
        kind, (start, end) = match.lastgroup or "", match.span()
        if kind == "urls":
            url = text[start:end]
            kept = url.rstrip(_URL_TAIL)
            if ")" in url[len(kept):] and "(" in kept and kept.count("(") > kept.count(")"):
                kept = url[:len(kept) + 1]  # a wiki link's own closing bracket
            end = start + len(kept)
        spans.append((start, end, kind))
    return spans


@dataclass(frozen=True)
class Span:
    """A protected span; whether whitespace stood on each side of it (a segment's edge counts as
    one), and whether a letter or digit did (`%dpx`: glued to its word)."""

    text: str
    space_before: bool
    space_after: bool
    glued_before: bool = False
    glued_after: bool = False

    def before(self, out: str) -> str:
        """What goes between the translation so far and the span: a space where the source had one,
        or where a translated word would otherwise touch a span the source kept apart ("(%s)")."""
        if not out or out.endswith(" "):
            return ""
        return " " if self.space_before or (out[-1].isalnum() and not self.glued_before) else ""

    def after(self, text: str) -> str:
        """What goes between the span and the translated `text` after it (as `before`); moved
        sentence punctuation is never set apart."""
        if text[0] in TRAILING_PUNCTUATION:
            return ""
        return " " if self.space_after or (text[0].isalnum() and not self.glued_after) else ""


@dataclass(frozen=True)
class Prepared:
    """One segment made ready for the model: `text` is what it translates; `render` makes its
    translation the segment's (module docstring). `slots`: the source between the spans (one more
    than `spans`); `word_slots`: the slot each word of `text` begins in; `loud`: the indices of
    `text`'s shouted words; `style`: the segment's case style; `bare`: the segment ends without
    final punctuation (and `ending` was on), so a full stop ending its translation is dropped;
    `mark`: the source's own final mark (`MARKS`, with `ending`), which ends its translation."""

    source: str
    text: str
    spans: tuple[Span, ...] = ()
    slots: tuple[str, ...] = ()
    word_slots: tuple[int, ...] = ()
    style: Style = "none"
    loud: tuple[int, ...] = field(default=())
    bare: bool = False
    mark: str = ""

    @property
    def identity(self) -> bool:
        """Nothing applies: the model translates the segment itself and its translation is kept as it is."""
        return not self.spans and self.style == "none" and not self.loud and not self.bare and not self.mark

    @property
    def needs_alignment(self) -> bool:
        """Whether `render` places words by an alignment: spans between words, or a shouted word."""
        return bool(self.loud) or len(set(self.word_slots)) > 1

    def render(self, translation: str, alignment: list[int] | None = None, *,
               truecase: Callable[[str], bool] | None = None) -> str:
        """The segment's translation from `translation` (of `text`): case style back, spans put
        back verbatim between the words `alignment` (for each word of `translation.split()`, the
        index of the word of `text` it translates, or -1) places in each slot, the full stop the
        model added to a bare segment dropped, the source's final mark put in place of the
        translation's (`with_mark`). `truecase(word)`: whether the target language writes
        a capitalised word so mid-sentence (None: a word after an opening span is left as it is)."""
        if self.identity:
            return translation
        if not any(c.isalnum() for c in self.text):
            return self.source  # only spans and punctuation: nothing was translated
        return with_mark(self._render(translation, alignment, truecase), self.mark)

    def _render(self, translation: str, alignment: list[int] | None,
                truecase: Callable[[str], bool] | None) -> str:
        if not self.spans and self.style == "none" and not self.loud:
            # only the ending: the rest as it came
            return drop_full_stop(translation) if self.bare else translation
        words = restyle(translation.split(), self.style)
        tail = " ".join(words[-2:])
        if self.bare and len(drop_full_stop(tail)) < len(tail):
            words[-1] = words[-1][:-1]  # "" for a full stop of its own: the words keep their places
        usable = alignment is not None and len(alignment) == len(words)
        if self.loud and usable and words:
            words = _emphasise(words, alignment or [], self.loud)
        if not self.spans:
            return " ".join(word for word in words if word)
        return self._place(words, alignment if usable else None, truecase)

    def _place(self, words: list[str], alignment: list[int] | None,
               truecase: Callable[[str], bool] | None) -> str:
        k, m = len(self.slots), len(words)
        starts, begun = [], 0  # starts[j]: words of `text` begun before slot j
        for j in range(k):
            starts.append(begun)
            begun += bisect_right(self.word_slots, j) - bisect_left(self.word_slots, j)
        n = max(len(self.word_slots), 1)
        even = [round(start * m / n) for start in starts] + [m]
        bounds = even
        if alignment is not None and m and m * k * k <= MAX_PLACEMENT_WORK:  # html's bound on the DP's work
            bounds = aligned_bounds(alignment, list(self.word_slots), even, k)
        texts = [" ".join(word for word in words[bounds[j]:bounds[j + 1]] if word) for j in range(k)]
        for j in range(k - 1):  # a full stop the source has after the span goes after it (and after
            word = texts[j]     # the spans that follow it with only whitespace between them)
            cut = len(word) - len(word.rstrip(TRAILING_PUNCTUATION))
            if (cut and word[:-cut].strip()
                    and not self.slots[j].rstrip().endswith(tuple(TRAILING_PUNCTUATION))):
                to = next((i for i in range(j + 1, k) if self.slots[i].strip() or texts[i]), k - 1)
                texts[j], texts[to] = word[:-cut].rstrip(), (word[-cut:] + " " + texts[to]).strip()
        if truecase is not None and not texts[0] and self._opens_lower():
            # the sentence's first word follows a span: no capital for being first
            # ("2 blond girls": "2 blonde Mädchen")
            after = next((j for j in range(1, k) if texts[j]), None)
            if after is not None:
                texts[after] = _uncapitalised(texts[after], truecase)
        out = texts[0]
        for span, after in zip(self.spans, texts[1:]):
            out += span.before(out) + span.text
            if after:
                out += span.after(after) + after
            elif span.space_after:
                out += " "
        return out.rstrip()

    def _opens_lower(self) -> bool:
        """A span opens the segment and the first source word after it starts lower case."""
        if self.style != "none" or self.slots[0].strip():
            return False
        first = next((c for slot in self.slots[1:] for c in slot if c.isalpha()), "")
        return first.islower()


def drop_full_stop(translation: str) -> str:
    """`translation` without the one full stop that ends it (`FULL_STOPS`, trailing whitespace
    aside; a space before it goes with it): none after another full stop or an ellipsis ('...',
    '…', '。。'), nor an abbreviation's, whose word holds a period inside ('z.B.', 'U.S.', and a
    URL's or a number's), nor the only thing there."""
    end = len(translation.rstrip())
    body = translation[:end - 1]
    if (not end or translation[end - 1] not in FULL_STOPS or not body.strip()
            or body[-1] in FULL_STOPS + "…"):
        return translation
    word = "" if body[-1].isspace() else body.split()[-1]
    return translation if "." in word else body.rstrip() + translation[end:]


def final_mark(segment: str) -> str:
    """The mark of `MARKS` that ends `segment` (trailing whitespace aside; its whole final run of
    punctuation: "Really?!" has none), or ""."""
    core = segment.rstrip()
    run = core[len(core.rstrip(_ENDS)):]
    return run if run in MARKS else ""


def with_mark(translation: str, mark: str) -> str:
    """`translation` ending in `mark` (trailing whitespace kept): the final run of punctuation it
    has (`Namen.`, `Öffnen…`) replaced, or the mark added after its last character. Unchanged
    without a mark, and when nothing but punctuation would be left to carry it."""
    if not mark:
        return translation
    core = translation.rstrip()
    body = core.rstrip(_ENDS)
    if not any(c.isalnum() for c in body):
        return translation
    return body + mark + translation[len(core):]


def _uncapitalised(text: str, truecase: Callable[[str], bool]) -> str:
    """`text` with its first word's capital made lower case (punctuation before it aside), unless
    the word is in capitals (an acronym) or `truecase` says the target language writes it so."""
    at = next((i for i, c in enumerate(text) if c.isalpha()), None)
    if at is None or not text[at].isupper():
        return text
    word = text[text.rfind(" ", 0, at) + 1:].split(" ", 1)[0]
    second = next((c for c in text[at + 1:at + len(word)] if c.isalpha()), "")
    # "USB-Sticks": an acronym's capitals; the word asked about without the marks around it ("A。": "A")
    if second.isupper() or truecase(word.strip(_AROUND + FULL_STOPS + "…()[]")):
        return text
    return text[:at] + text[at].lower() + text[at + 1:]


def _emphasise(words: list[str], alignment: list[int], loud: Sequence[int]) -> list[str]:
    """`words` with those the alignment links to a shouted source word in capitals; a shouted word no
    translated word is linked to (attention often lands one word off) puts its capitals on the word
    linked to the source word nearest to it."""
    out, links = list(words), {}
    for t, a in enumerate(alignment):
        if a >= 0:
            links.setdefault(a, []).append(t)
    for i in loud:
        near = i if i in links else min(links, key=lambda a: (abs(a - i), a), default=None)
        for t in links.get(near, []) if near is not None else []:
            out[t] = out[t].upper()
    return out


def prepare(segment: str, kinds: Sequence[str], case: bool, count: Count, ending: bool = False) -> Prepared:
    """`segment` (one sentence) made ready for the model (module docstring): spans of `kinds` out,
    an upper or title line in sentence case (with `case`), shouted words noted, a segment without
    final punctuation marked `bare` and one ending in a mark of `MARKS` given it (with `ending`)."""
    found = find_spans(segment, kinds)
    last = len(segment.rstrip())  # a bare ending: a letter, a digit or a span
    bare = ending and last > 0 and (segment[last - 1].isalnum() or bool(found) and found[-1][1] == last)
    mark = final_mark(segment) if ending and _ALNUM.search(segment) else ""
    if not found and not (case and any(c.isupper() for c in segment)):
        # the common case: no span, no capital to look at
        return Prepared(segment, segment, bare=bare, mark=mark)
    spans, slots, at = [], [], 0
    for start, end, _ in found:
        slots.append(segment[at:start])
        before = start == 0 or segment[start - 1].isspace()
        after = end == len(segment) or segment[end].isspace()
        glued = (start > 0 and segment[start - 1].isalnum(), end < len(segment) and segment[end].isalnum())
        spans.append(Span(segment[start:end], before, after, *glued))
        at = end
    slots.append(segment[at:])
    words, word_slots = [], []
    for j, slot in enumerate(slots):
        for w, word in enumerate(slot.split()):
            glued = w == 0 and words and not slot[:1].isspace() and not word[0].isalnum()
            if glued:  # "Hello {name}, you": the comma joins "Hello" as the model reads it ("Hello, you")
                words[-1] += word
            else:
                words.append(word)
                word_slots.append(j)
    style = case_style(words) if case else "none"
    model_words = sentence_case(words, style, count) if style != "none" else words
    loud = tuple(shouted(words, count)) if case and style == "none" else ()
    if loud:
        model_words = [w.lower() if i in loud else w for i, w in enumerate(model_words)]
    if not spans and style == "none" and not loud:
        return Prepared(segment, segment, bare=bare, mark=mark)
    return Prepared(segment, " ".join(model_words), tuple(spans), tuple(slots), tuple(word_slots), style,
                    loud, bare, mark)


Aligner = Callable[[list[str], list[str]], "list[list[int]] | None"]


def render_all(prepared: Sequence[Prepared], translations: Sequence[str], align: Aligner | None, *,
               truecase: Callable[[str], bool] | None = None) -> list[str]:
    """Each prepared segment's translation rendered (`Prepared.render`, with `truecase`);
    `align(sources, targets)` (mt.decode.align) is called once for the segments that need an
    alignment (None: by position)."""
    todo = [i for i, p in enumerate(prepared) if p.needs_alignment and translations[i].strip()]
    found = (align([prepared[i].text for i in todo], [translations[i] for i in todo])
             if todo and align else None)
    alignments: dict[int, list[int]] = dict(zip(todo, found or []))
    return [p.render(t, alignments.get(i), truecase=truecase)
            for i, (p, t) in enumerate(zip(prepared, translations))]


def _whole_span(word: str, kinds: Sequence[str]) -> bool:
    found = find_spans(word, kinds)
    return len(found) == 1 and found[0][:2] == (0, len(word))


def span_links(align: Aligner | None, kinds: Sequence[str] = KINDS) -> Aligner | None:
    """`align` (sources, targets -> word alignments) with every target word that IS a protected span
    of its source (verbatim, punctuation around it aside; found once in the source) linked to that
    span's source word, and every other word linked to such a span unlinked (-1: placed by its
    neighbours): inline markup around a URL or placeholder (`<b>{count}</b>`) then stays on
    exactly that span whatever the attention says. None stays None."""
    if align is None:
        return None

    def linked(sources: list[str], targets: list[str]) -> list[list[int]] | None:
        found = align(sources, targets)
        if found is None:
            return None
        out = []
        for source, target, alignment in zip(sources, targets, found):
            words = [w.strip(_AROUND) for w in source.split()]
            seen = Counter(words)
            spans = {w: i for i, w in enumerate(words) if seen[w] == 1 and _whole_span(w, kinds)}
            fixed, at_span = list(alignment), set(spans.values())
            for t, word in enumerate(target.split()[:len(fixed)]):
                # a span's translation is its copy: another word linked to it is linked to nothing
                fixed[t] = spans.get(word.strip(_AROUND), -1 if fixed[t] in at_span else fixed[t])
            out.append(fixed)
        return out

    return linked

