"""UI strings: the rules a localisation file's messages need beside the span, case and ending rules
(`mt.text.protect`), applied by the .po and XLIFF passes (`mt.text.po`, `mt.text.xliff`) around the
`translate_texts` they are given, so the translation path itself is not touched. Pure functions
over a source message and its translation; what translate-toolkit's `pofilter` and gettext's
`msgfmt --check-accelerators` check, fixed where a machine can fix it:

- **Accelerators** (`accelerator_of`, `take_accelerator`, `put_accelerator`): the keyboard
  shortcut mark of a menu label (GTK `_Open`, Qt and KDE `&Open`, LibreOffice `~Open`). The mark
  of a file is its header's `X-Accelerator-Marker` (KDE's and Pology's field) or, without one, the
  one of `_`, `&` and `~` that most messages use before a letter (at least `MIN_MARKED` of them,
  one opening a word before a capital as a label's does: identifiers such as `user_name` make no
  style; an HTML entity `&amp;` is no mark). A message with exactly one mark before a letter or digit (the
  case `msgfmt --check-accelerators` checks) is translated without it, and the mark is put back in
  front of the same letter of the translation where it has one (a word's first letter first,
  case aside), else in front of its first letter. A doubled mark (`__`, `&&`, `~~`) is the literal
  character and stays text.
- **Kept verbatim** (`shield`, `unshield`): markup tags (`<b>`), `<%s>`, a bracketed shortcut or
  symbol (`(R)`, `(Ctrl+S)`), an acronym (`D-BUS`, `UTF-8`) in a line the case rule does not read
  as ALL CAPS, a file path or lone slash, a file name or extension, a command-line option, a
  strftime field (`%B`), and each bracket (`_KEEP`), as placeholders `{_0}` that the span rules of
  `mt.text.protect` take out of what the model reads and put back where the words around them go:
  pofilter's `xmltags`, `acronyms`, `filepaths` and `brackets` checks then hold whatever the model
  does (with `decode.text.protect` holding `placeholders`, its default).
- **Brackets** (`balance_brackets`): a translation with more `(`, `)`, `[`, `]`, `{` or `}` than
  its source loses the surplus (the rightmost unpaired ones first), as pofilter's `brackets`
  check counts them; a missing bracket is not invented.
- **Doubled words** (`undouble`): a word the translation writes twice in a row ("Ein Ein Hund")
  where the source writes no word twice in a row is written once; words compared as pofilter's
  `doublewords` check compares them (case and full stops aside).
- **No full stop the source lacks** (`no_added_stop`): a message ending in a closing bracket or
  quote, which the ending rule of `mt.text.protect` leaves to the model, gets no final full stop.
- **Low confidence** (`low_confidence_note`): given confidences (`Scored`: mt.decode.confidence's,
  the sentence chrF the model expects), a message under `LOW_CONFIDENCE` (0.3) gets a note a
  reviewer sees: a translator comment in a `.po`, a `<note>` for the target in XLIFF.

`fix_message(source, translation)` applies brackets, doubled words and the full stop;
`translate_messages` applies every rule around a translate callable, with the file's accelerator.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable

from mt.text.case import case_style
from mt.text.protect import KINDS, PATTERNS, drop_full_stop, find_spans

Scored = Callable[[list[str]], list[tuple[str, float]]]  # texts -> (translation, confidence in [0, 1]) each
# Under this confidence a filled message gets a note a reviewer sees (`low_confidence_note`): the
# threshold below which mt.decode.confidence calls a sentence doubtful (its LOW; a test keeps them equal).
LOW_CONFIDENCE = 0.3
MARKERS = ("_", "&", "~")
MIN_MARKED = 2  # messages with a mark before a letter for a file to have that accelerator style
_ENTITY = re.compile(r"&(?:[A-Za-z]{1,10}|#\d{1,7}|#x[0-9A-Fa-f]{1,6});")
SENTENCE_ENDS = ".:;!?…。．？！：；"  # a source ending in one of these keeps what the model ends with
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_MARKUP_OR_PLACEHOLDER = re.compile(rf"(<[^<>]*>|{PATTERNS['placeholders']})")
# What a UI string keeps verbatim beyond the span kinds (`shield`), in the order tried at a place:
# markup tags and <...> around a placeholder or address, a bracketed shortcut or symbol with no
# lower-case letter ("(R)", "(CR LF)"; "(Ctrl+S)" is a key combination), an acronym ("D-BUS",
# "UTF-8", "OK"), a file path or a lone slash ("/usr/share", "DOS / Windows": pofilter's `filepaths`
# reads any word starting with "/"), a file name or extension ("README.md", ".tar.gz"), a
# command-line option ("--add", "-v"), a strftime field printf has not ("%B", "%Y", "%H", GNU
# date's "%N"), and a bracket of its own, so a translation keeps each one.
_KEEP = re.compile("|".join((
    r"</?[A-Za-z][\w:-]{0,30}(?:\s[^<>]{0,200})?/?>", r"<[^<>\s]{1,100}>",
    r"\((?:[^()a-z\n]{1,30}|(?:Ctrl|Alt|Shift|Super|Meta|Cmd)\+[^()\n]{1,30})\)", r"\[[^\[\]a-z\n]{1,30}\]",
    r"(?<![\w.])(?:[\w-]{2,64})?(?:\.[A-Za-z][A-Za-z0-9]{1,9}){1,3}(?![\w.])",
    r"(?<![\w-])[A-Z](?:[A-Z0-9]{1,30}(?:[-_.][A-Z0-9]{1,30}){0,5}|(?:[-_.][A-Z0-9]{1,30}){1,5})(?![\w-])",
    r"(?<!\S)~?/\S{0,200}",
    r"(?<![\w-])--?[A-Za-z][\w-]{0,40}(?![\w-])", r"%[-_0^#]?[BbhHIjmMpSUwWyYZklTRDCVuNPz]", r"[()\[\]]")))
TOKEN = "{{_{}}}"  # what stands for a kept piece: a placeholder the span rules keep ("{_0}")
_TOKEN = re.compile(r"\{_(\d{1,4})\}")


def marks(text: str, marker: str) -> list[int]:
    """Indices of the accelerator marks in `text`: `marker` before a letter or a digit, a doubled
    marker (the literal character) and an HTML entity's `&` skipped."""
    found, i = [], 0
    while True:
        i = text.find(marker, i)
        if i < 0 or i + 1 >= len(text):
            return found
        if text[i + 1] == marker:
            i += 2
            continue
        if text[i + 1].isalnum() and not (marker == "&" and _ENTITY.match(text, i)):
            found.append(i)
        i += 1


def accelerator_of(messages: Iterable[str], header: str | None = None) -> str | None:
    """The file's accelerator mark: `header` (its X-Accelerator-Marker) when that is one character,
    else the marker of `MARKERS` the most messages carry exactly once (at least `MIN_MARKED`, one
    of them a label's: the mark opening a word before a capital, "_Open", "&File"; identifiers
    such as "user_name" are no style), or None."""
    if header is not None and len(header.strip()) == 1:
        return header.strip()
    counts: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    for text in messages:
        for marker in MARKERS:
            found = marks(text, marker)
            if len(found) == 1:
                at = found[0]
                counts[marker] += 1
                labels[marker] += (at == 0 or not text[at - 1].isalnum()) and text[at + 1].isupper()
    best = max(MARKERS, key=lambda marker: counts[marker])
    return best if counts[best] >= MIN_MARKED and labels[best] else None


def take_accelerator(text: str, marker: str | None) -> tuple[str, str]:
    """`text` without its accelerator mark, and the letter the mark stood before ("" when `text`
    has no mark, or more than one, which is left as it is)."""
    if marker is None:
        return text, ""
    found = marks(text, marker)
    if len(found) != 1:
        return text, ""
    at = found[0]
    return text[:at] + text[at + 1:], text[at + 1]


def put_accelerator(translation: str, letter: str, marker: str | None) -> str:
    """`translation` with `marker` before `letter` (a word's first letter first, then any, case
    aside), else before its first letter or digit; unchanged without a letter or where it already
    has a mark."""
    if not letter or marker is None or marks(translation, marker):
        return translation
    low = translation.lower()
    starts = [i for i, c in enumerate(low) if c == letter.lower() and (i == 0 or not low[i - 1].isalnum())]
    inside = [i for i, c in enumerate(low) if c == letter.lower()]
    first = [i for i, c in enumerate(translation) if c.isalnum() and c != marker]
    at = (starts or inside or first or [None])[0]
    if at is None:
        return translation
    return translation[:at] + marker + translation[at:]


def balance_brackets(source: str, translation: str) -> str:
    """`translation` without the brackets it has beyond its source's count of each (module docstring)."""
    out = list(translation)
    for opening, closing in _PAIRS.items():
        for char, partner, step in ((closing, opening, -1), (opening, closing, 1)):
            surplus = out.count(char) - source.count(char)
            if surplus <= 0:
                continue
            # unpaired first: a closing bracket with no opening before it (scanning left), and back
            unpaired, depth = [], 0
            order = range(len(out)) if step == -1 else range(len(out) - 1, -1, -1)
            for i in order:
                if out[i] == partner:
                    depth += 1
                elif out[i] == char:
                    if depth:
                        depth -= 1
                    else:
                        unpaired.append(i)
            paired = [i for i, c in enumerate(out) if c == char and i not in unpaired]
            drop = sorted(unpaired, reverse=True)[:surplus]
            drop += sorted(paired, reverse=True)[:surplus - len(drop)]
            for i in sorted(drop, reverse=True):
                del out[i]
    return "".join(out)


def _core(word: str) -> str:
    """A word as pofilter's `doublewords` compares them: markup and placeholders out ("%dx" and
    "x%d" are both "x"), full stops out, lower case."""
    return _MARKUP_OR_PLACEHOLDER.sub("", word).replace(".", "").lower()


def undouble(source: str, translation: str) -> str:
    """`translation` with a word written twice in a row (markup and placeholders between them read
    past, as pofilter reads them) written once: the second copy's letters go, its markup,
    placeholders and punctuation stay where it stood ("Ende Ende." -> "Ende.", "Name Name:" -> "Name:",
    "Fett</b> Fett</b>" -> "Fett</b></b>"); unless the source writes a word twice in a row itself.
    The spacing of the rest kept."""
    words = [_core(word) for word in source.split()]
    if any(a and a == b for a, b in zip(words, words[1:])):
        return translation
    out: list[str] = []
    last = -1  # the index in `out` of the last word that is no placeholder (pofilter reads past those)
    for part in re.split(r"(\s+)", translation):
        if (part and not part.isspace() and last >= 0 and _core(part)
                and _core(out[last]) in (_core(part), _core(part).rstrip(",;:!?…"))):
            rest = "".join(piece if i % 2 else "".join(c for c in piece if not c.isalnum())
                           for i, piece in enumerate(_MARKUP_OR_PLACEHOLDER.split(part)))
            if out[-1].isspace():  # the second copy's letters go, with the space before them
                out.pop()
            out[-1] += rest  # its markup, placeholders and punctuation stay where it stood
            continue
        out.append(part)
        if part and not part.isspace() and _core(part):  # pofilter reads past markup and placeholders
            last = len(out) - 1
    return "".join(out)


def no_added_stop(source: str, translation: str) -> str:
    """`translation` without the full stop that ends it when `source` ends in no sentence
    punctuation at all ("Print (Ctrl+P)", 'Open "%s"'): the `none` of pofilter's `endpunc`, for
    what the ending rule of `mt.text.protect` leaves to the model (a closing bracket or quote)."""
    core = source.rstrip()
    if not core or core[-1] in SENTENCE_ENDS:
        return translation
    return drop_full_stop(translation)


def fix_message(source: str, translation: str) -> str:
    """The UI-string fixups that need no file setting: brackets balanced, doubled words once, no
    full stop the source does not have."""
    return no_added_stop(source, undouble(source, balance_brackets(source, translation)))


def shield(text: str) -> tuple[str, list[str]]:
    """`text` with each piece a UI string keeps verbatim (`_KEEP`) outside its spans replaced by a
    placeholder `{_0}`, `{_1}`... (which `mt.text.protect` takes out of what the model reads and
    puts back where the words around it went), and those pieces in order. An acronym is kept only
    in a line the case rule does not read as ALL CAPS ("OK" alone is kept, "SAVE ALL" is not). Text
    that already holds such a placeholder is left as it is."""
    if "{_" in text:
        return text, []
    spans = find_spans(text, KINDS)
    mixed = case_style(text.split()) != "upper"  # an ALL CAPS line's words are the case rule's
    out, kept, at, k = [], [], 0, 0
    for match in _KEEP.finditer(text):
        start, end = match.span()
        while k < len(spans) and spans[k][1] <= start:
            k += 1
        # a span across the piece's edge, or holding it, wins; a piece holding whole spans ("<%s>") is kept
        crossed = False
        for a, b, _ in spans[k:]:
            if a >= end:
                break
            crossed = crossed or a < start < b or a < end < b or (a <= start and end <= b)
        acronym = match.group()[0].isupper() and match.group().isupper()
        if crossed or (acronym and not mixed):
            continue
        out.append(text[at:start] + TOKEN.format(len(kept)))
        kept.append(match.group())
        at = end
    return "".join(out) + text[at:], kept


def unshield(translation: str, kept: list[str]) -> str:
    """`translation` with each placeholder of `shield` back as the piece it stands for (one the
    model did not return is lost, as any word would be)."""
    if not kept:
        return translation
    return _TOKEN.sub(lambda m: kept[int(m.group(1))] if int(m.group(1)) < len(kept) else m.group(),
                      translation)


def same_line_breaks(source: str, translation: str) -> str:
    """`translation` with the source's leading and trailing line breaks (msgfmt --check wants them equal)."""
    core = translation.strip("\n")
    lead = source[:len(source) - len(source.lstrip("\n"))]
    trail = source[len(source.rstrip("\n")):]
    return lead + core + trail


def unscored(translate_texts: Callable[[list[str]], list[str]]) -> Scored:
    """`translate_texts` as a `Scored` callable: every confidence NaN (unknown: no note)."""
    return lambda texts: [(text, math.nan) for text in translate_texts(texts)]


def translate_messages(texts: list[str], translate: Scored, marker: str | None) -> list[tuple[str, float]]:
    """UI messages translated with these rules, each with its confidence (`translate`'s; NaN when
    unknown): each one's accelerator `marker` taken out before `translate` and put back on a letter
    of its translation, markup, acronyms, paths, bracketed shortcuts and brackets kept (`shield`),
    surplus brackets dropped, doubled words once, no full stop the source lacks, the source's edge
    line breaks kept."""
    taken = [take_accelerator(text, marker) for text in texts]
    shielded = [shield(bare) for bare, _ in taken]
    found = translate([text for text, _ in shielded]) if texts else []
    return [(put_accelerator(same_line_breaks(bare, fix_message(bare, unshield(text, kept))), letter, marker),
             score)
            for (bare, letter), (_, kept), (text, score) in zip(taken, shielded, found)]


def low_confidence_note(confidence: float, low: float = LOW_CONFIDENCE) -> str | None:
    """What a reviewer reads beside a machine translation whose confidence is under `low`; None
    for one at or above it, or with no confidence (NaN)."""
    if not confidence < low:
        return None
    return f"mt: confidence {confidence:.2f} (below {low:.2f}): this machine translation is likely wrong"
