"""Segmentation: a person's text -> the segments a sentence-level model translates -> the text's
shape back. The one place every path that takes text from a person goes through (`mt translate`,
the server's routes and page, the file formats); evaluation on sentence-aligned sets does not.

A text becomes a `Segmented`: its segments and the *gaps* around them, so that
`gaps[0] + segments[0] + gaps[1] + ... + segments[-1] + gaps[-1] == text` (exactly, always).
`render(translations)` puts each segment's translation between the same gaps: every space, tab,
line break, blank line and indentation comes back where it was.

- **Line breaks are hard boundaries.** Each line is split on its own; a sentence never spans a
  line break, so a file of N lines gives N lines back and a line's break stays where it was.
  (A hard-wrapped e-mail's sentence is translated in its line pieces: the shape wins.)
- **Sentences** inside a line come from `sentencex` (Wikimedia's rule-based segmenter, the one
  MinT serves with; ~300 languages with fallbacks, abbreviation lists per language, Rust; nothing
  downloaded at run time), chosen by the source language. The comparison with pysbd and MiniSBD
  that picked it is in docs/guides/paragraphs.md.
- **Segments without words stay in the gaps** and never reach the model: a run without a letter
  (numbers, punctuation, emoji), and a lone URL or e-mail address.
- **Sentences in another script's habits.** Chinese and Japanese sentences follow one another
  without a space (`。！？` and their full-width forms end them); English ones with one. So the
  gap between two sentences of a line is rendered for the target language (`Segmenter.target`):
  an empty one becomes a space in a language written with spaces, a run of spaces becomes empty
  in one written without (zh, ja, th ...); line breaks and everything else stay as written.
- **Too long for the model**: `fit(texts, count, limit)` breaks a segment of more than `limit`
  pieces (`count` is the model's source tokenizer) at the best boundary below the limit: after
  clause punctuation (, ; : and their CJK forms) when that keeps at least half the limit, else
  between words (a token window), else between characters (text without spaces). The pieces are
  ordinary segments whose gaps are the whitespace that stood at the break; nothing is cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import sentencex

from mt.text.protect import KINDS, find_spans

_LETTER_LIKE = re.compile(r"[^\W\d_]")  # \w less digits and "_": letters, and numerals such as "²"
# A lone URL, www. address or e-mail address (also a fediverse @user@host): no words to translate.
_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.)\S+|@?[^\s@]+@[^\s@]+\.[^\s@]+", re.IGNORECASE)
CLAUSE_MARKS = frozenset(",;:，；：、")  # a break after one of these keeps a clause whole
# Languages written without spaces between words or sentences (base codes): their translations'
# sentences are joined without one, and theirs get one in a language written with spaces.
UNSPACED_LANGUAGES = frozenset({"zh", "zho", "cmn", "yue", "wuu", "ja", "jpn", "th", "tha", "lo", "lao",
                                "km", "khm", "my", "mya", "bo", "bod"})


@dataclass(frozen=True)
class Segmented:
    """One text as gaps and segments: text == gaps[0] + segments[0] + ... + segments[-1] + gaps[-1]
    (len(gaps) == len(segments) + 1). `broken`: sentences `fit` broke into several segments."""

    gaps: tuple[str, ...]
    segments: tuple[str, ...]
    broken: int = 0
    # How two sentences of one line are joined in the translation: "" = by their gap, as written;
    # "spaced" = an empty gap becomes one space (Chinese or Japanese into a language with spaces);
    # "unspaced" = a gap of spaces becomes empty (into Chinese, Japanese, Thai ...). Line breaks stay.
    joining: str = ""

    @property
    def text(self) -> str:
        """The source text, exactly (its own gaps, whatever `joining` says)."""
        return replace(self, joining="").render(self.segments)

    def render(self, translations: Sequence[str]) -> str:
        """The text with segment i replaced by translations[i], every gap kept."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} segments")
        out = [self.gaps[0]]
        last = len(translations) - 1
        for i, (translation, gap) in enumerate(zip(translations, self.gaps[1:])):
            out += [translation, self._join(gap) if i < last else gap]
        return "".join(out)

    def _join(self, gap: str) -> str:
        """The gap between two translated sentences, by `joining` (a gap with a line break, or with
        anything but spaces in it, is kept as written)."""
        if self.joining == "spaced" and gap == "":
            return " "
        if self.joining == "unspaced" and gap and not gap.strip(" "):
            return ""
        return gap


def whole_lines(text: str) -> Segmented:
    """Today's unsegmented shape, one segment per line with words (for pre-split input): the line
    stripped as `translate_lines` strips it; a line without words stays in the gaps."""
    gaps, segments, gap = [], [], ""
    for i, line in enumerate(text.split("\n")):
        core = line.strip()
        if i:
            gap += "\n"
        if not core:
            gap += line
            continue
        start = line.index(core)
        gaps.append(gap + line[:start])
        segments.append(core)
        gap = line[start + len(core):]
    return Segmented((*gaps, gap), tuple(segments))


@dataclass(frozen=True)
class Segmenter:
    """Sentence boundaries for one source language (an ISO 639 code; sentencex falls back through
    related languages to its default rules for a code it has no rules for)."""

    lang: str
    target: str = ""  # the language the sentences are translated into ("" = join them as the source does)

    @property
    def joining(self) -> str:
        """`Segmented.joining` for this pair: sentences of a source without spaces joined by one in a
        target with spaces; sentences joined without one in a target without spaces."""
        if not self.target:
            return ""
        if _code(self.target) in UNSPACED_LANGUAGES:
            return "unspaced"
        return "spaced" if _code(self.lang) in UNSPACED_LANGUAGES else ""

    def split(self, text: str) -> Segmented:
        """`text` as gaps and sentences (see the module docstring): lines split on '\\n' first."""
        gaps, segments, gap = [], [], ""
        for i, line in enumerate(text.split("\n")):
            if i:
                gap += "\n"
            for sentence in self.sentences(line):
                core = sentence.strip()
                if not has_words(core):
                    gap += sentence
                    continue
                start = sentence.index(core)
                gaps.append(gap + sentence[:start])
                segments.append(core)
                gap = sentence[start + len(core):]
        return Segmented((*gaps, gap), tuple(segments), joining=self.joining)

    def sentences(self, line: str) -> list[str]:
        """The sentences of one line (no '\\n' in it), whitespace attached: they join back to `line`."""
        if not line.strip():
            return [line]
        found = list(sentencex.segment(_code(self.lang), line))
        if "".join(found) != line:  # never seen; the shape guarantee must not rest on a library's habits
            return [line]
        return joined_across_spans(line, found)


def joined_across_spans(line: str, sentences: list[str]) -> list[str]:
    """`sentences` (joining back to `line`) with every boundary that falls inside a span the model
    must keep whole (`mt.text.protect.find_spans`: "%.*s", "%.0f", "{0:.2f}", a URL, "3.5") taken
    out: a placeholder is never cut into two segments, its "%." read as a sentence's end."""
    if len(sentences) < 2:
        return sentences
    spans = find_spans(line, KINDS)
    out, at = [sentences[0]], len(sentences[0])
    for sentence in sentences[1:]:
        if any(start < at < end for start, end, _ in spans):
            out[-1] += sentence
        else:
            out.append(sentence)
        at += len(sentence)
    return out


@lru_cache(maxsize=64)
def segmenter_for(lang: str, target: str = "") -> Segmenter:
    """The segmenter of a source language, translating into `target` (one per pair; they hold no state)."""
    return Segmenter(lang, target)


def _code(lang: str) -> str:
    """sentencex's code for a language code: the base language ("pt-BR" -> "pt", "zh_Hant" -> "zh")."""
    return re.split(r"[-_]", lang.strip().lower(), maxsplit=1)[0] or "en"


def has_words(text: str) -> bool:
    """Whether a segment has anything to translate: a letter, and it is not a lone address."""
    return has_letter(text) and _ADDRESS.fullmatch(text) is None


def has_letter(text: str) -> bool:
    """`any(c.isalpha() for c in text)`, scanned by the regex engine: a line of 10,000 symbols is
    read in C. `_LETTER_LIKE` finds every letter and the few other characters `\\w` holds that are
    no digit ("²", "½"), so each match is checked."""
    return any(match.group().isalpha() for match in _LETTER_LIKE.finditer(text))


def fit(texts: Sequence[Segmented], count: Callable[[list[str]], list[int]], limit: int) -> list[Segmented]:
    """`texts` with every segment of more than `limit` pieces (`count(segments) -> piece counts`,
    the model's source tokenizer) broken into pieces of at most `limit` (module docstring).
    `limit` < 1 is a ValueError. Counts every segment once, in one call; only long ones again."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1 piece, got {limit}")
    flat = [segment for text in texts for segment in text.segments]
    lengths = iter(count(flat) if flat else [])
    out = []
    for text in texts:
        long = [next(lengths) > limit for _ in text.segments]
        if not any(long):
            out.append(text)
            continue
        gaps, segments = [text.gaps[0]], []
        for segment, gap, too_long in zip(text.segments, text.gaps[1:], long):
            pieces = _break(segment, count, limit) if too_long else [(segment, "")]
            for piece, inner in pieces[:-1]:
                segments.append(piece)
                gaps.append(inner)
            segments.append(pieces[-1][0])
            gaps.append(gap)
        out.append(replace(text, gaps=tuple(gaps), segments=tuple(segments), broken=text.broken + sum(long)))
    return out


def _break(sentence: str, count: Callable[[list[str]], list[int]], limit: int) -> list[tuple[str, str]]:
    """(piece, the whitespace after it) for one sentence over `limit`: pieces of at most `limit`
    (a single character over it stays whole), joined with those gaps they give the sentence back."""
    pieces, rest = [], sentence
    while (window := _over(rest, count, limit)) is not None:
        cut = _best_cut(window, count, limit)  # within the window: nothing longer fits
        head = rest[:cut].rstrip()
        tail = rest[cut:].lstrip()
        if not tail:  # only trailing space after the cut: nothing left to break off
            break
        pieces.append((head, rest[len(head):len(rest) - len(tail)]))
        rest = tail
    return [*pieces, (rest, "")]


def _over(text: str, count: Callable[[list[str]], list[int]], limit: int) -> str | None:
    """The shortest prefix of `text` of 4 x `limit` characters doubled that has more than `limit`
    pieces (a longer prefix never has fewer), or None when all of `text` fits. Each break then
    counts a window about the size of what it breaks off, not the whole rest of the sentence: a
    long line costs linear time, not one count of the rest per piece (quadratic)."""
    size = 4 * limit
    while True:
        head = text[:size]
        if count([head])[0] > limit:
            return head
        if size >= len(text):
            return None
        size *= 2


def _best_cut(text: str, count: Callable[[list[str]], list[int]], limit: int) -> int:
    """Where to end the next piece of `text`: after clause punctuation if such a piece fits and
    holds at least half the limit, else the last word boundary that fits, else the last character
    boundary that fits (at least one character, so every call makes progress)."""
    words = [m.start() for m in re.finditer(r"(?<=\S)\s", text)]  # a piece ends before whitespace
    clauses = [i for i in words if text[i - 1] in CLAUSE_MARKS]
    clauses += [i + 1 for i, c in enumerate(text[:-1]) if c in "，；：、" and not text[i + 1].isspace()]
    fits = lambda i: count([text[:i]])[0] <= limit  # noqa: E731
    clause = _last_fitting(sorted(clauses), fits)
    if clause and count([text[:clause]])[0] * 2 >= limit:
        return clause
    word = _last_fitting(words, fits)
    if word:
        return word
    return _last_fitting(list(range(1, len(text))), fits) or 1


def _last_fitting(candidates: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest candidate (ascending) for which `fits` holds, by binary search (a longer prefix
    never has fewer pieces), or None."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(candidates[mid]):
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    return best
