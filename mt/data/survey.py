"""What a recipe needs to know of a corpus, read in one pass: pairs, words per side, the script
each side is written in, distinct words, each side's characters and duplicate pairs (`survey`).

Words are whitespace-separated tokens (a sentencepiece model does not exist yet). Text written
without spaces (Han, Kana, Thai, Lao, Khmer, Myanmar, Tibetan) is read in characters instead:
its "words" are its characters, and its distinct units (`*_types`, what the vocabulary is sized
from) are its distinct characters plus the character bigrams seen at least `NGRAM_MIN_COUNT`
times (a Chinese word is one to three characters; the frequent bigrams stand in for the words a
segmenter would find). Scripts are counted over the letters of the first `SCRIPT_SAMPLE` lines of
each side (`mt.data.clean_rules.SCRIPT_RANGES`); the most frequent one names the side.

Each side's characters are counted with their frequencies (`*_char_counts`, most frequent
first, a space counted as sentencepiece's `▁` together with the one it puts before every line):
the vocabulary must give the characters a `character_coverage` keeps a piece each
(`mt.train.recipe_vocab`), and sentencepiece refuses a vocabulary smaller than that.
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from mt.data.clean_rules import SCRIPT_RANGES
from mt.errors import MTError

SCRIPT_SAMPLE = 5000  # lines per side whose letters decide its script
_SCRIPTS = {name: re.compile("[" + chars + "]") for name, chars in SCRIPT_RANGES.items()}
# written without spaces between words
UNSPACED = ("Han", "Kana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")
# distinct words (or bigrams) counted per side at most (memory); beyond it the count is a floor
MAX_TYPES = 2_000_000
NGRAM_MIN_COUNT = 5  # a character bigram of unspaced text counts as a unit from this many occurrences
SPACE_PIECE = "\u2581"  # sentencepiece's ▁: how a space (and the start of every line) is counted


@dataclass(frozen=True)
class CorpusSurvey:
    """A corpus's training pairs at a glance (what `mt.train.recipe` chooses from)."""

    pairs: int
    src_words: int
    tgt_words: int
    src_types: int  # distinct words (at most MAX_TYPES)
    tgt_types: int
    src_script: str  # "Latin", "Cyrillic", "Han", ...; "" when a side has no letters
    tgt_script: str
    duplicates: int  # pairs equal to an earlier pair
    # (character, count) of each side, most frequent first; () when not counted (hand-made surveys)
    src_char_counts: tuple[tuple[str, int], ...] = ()
    tgt_char_counts: tuple[tuple[str, int], ...] = ()

    @property
    def src_unspaced(self) -> bool:
        """Whether the source is written without spaces between words (read in characters)."""
        return self.src_script in UNSPACED

    @property
    def tgt_unspaced(self) -> bool:
        return self.tgt_script in UNSPACED

    @property
    def words(self) -> int:
        return self.src_words + self.tgt_words

    @property
    def shared_script(self) -> bool:
        return self.src_script == self.tgt_script

    def describe(self) -> str:
        """e.g. '4,812 pairs, 52,113 + 49,870 words, Latin/Latin, 12 duplicate pairs'."""
        return (f"{self.pairs:,} pairs, {self.src_words:,} + {self.tgt_words:,} words, "
                f"{self.src_script or '?'}/{self.tgt_script or '?'}, {self.duplicates:,} duplicate pairs")


def _script(counts: dict[str, int]) -> str:
    return max(counts, key=lambda k: counts[k]) if any(counts.values()) else ""


def _words(text: str, unspaced: bool) -> list[str]:
    return [c for c in text if not c.isspace()] if unspaced else text.split()


def survey(pairs: Iterable[tuple[str, str]]) -> CorpusSurvey:
    """Count `pairs` (stripped source, target) in one pass; MTError when there are none."""
    n = dup = 0
    words = [0, 0]
    types: list[set[str]] = [set(), set()]
    letters: list[dict[str, int]] = [dict.fromkeys(_SCRIPTS, 0), dict.fromkeys(_SCRIPTS, 0)]
    seen: set[bytes] = set()
    unspaced = [False, False]
    chars: list[Counter[str]] = [Counter(), Counter()]
    bigrams: list[Counter[str]] = [Counter(), Counter()]
    for src, tgt in pairs:
        for side, text in enumerate((src, tgt)):
            if n < SCRIPT_SAMPLE:
                for name, pattern in _SCRIPTS.items():
                    letters[side][name] += len(pattern.findall(text))
                if n == SCRIPT_SAMPLE - 1:
                    unspaced[side] = _script(letters[side]) in UNSPACED
            in_chars = unspaced[side] or (n < SCRIPT_SAMPLE and _script(letters[side]) in UNSPACED)
            tokens = _words(text, in_chars)
            words[side] += len(tokens)
            chars[side].update(text)
            if in_chars and len(bigrams[side]) < MAX_TYPES:
                bigrams[side].update(map(operator.add, text, text[1:]))
            elif not in_chars and len(types[side]) < MAX_TYPES:
                types[side].update(tokens)
        key = hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=8).digest()
        dup += key in seen
        seen.add(key)
        n += 1
    if n == 0:
        raise MTError("the corpus is empty: no sentence pairs to train on")
    if words[0] == 0 or words[1] == 0:
        side = "source" if words[0] == 0 else "target"
        raise MTError(f"the corpus has no {side} text: every {side} line is empty (one language only?)")
    counts = [_char_counts(chars[side], n) for side in (0, 1)]
    units = [len(types[side]) if _script(letters[side]) not in UNSPACED else
             sum(1 for c, _ in counts[side] if c != SPACE_PIECE)
             + sum(1 for gram, k in bigrams[side].items() if k >= NGRAM_MIN_COUNT and " " not in gram)
             for side in (0, 1)]
    return CorpusSurvey(n, words[0], words[1], units[0], units[1], _script(letters[0]), _script(letters[1]),
                        dup, counts[0], counts[1])


def _char_counts(chars: Counter[str], lines: int) -> tuple[tuple[str, int], ...]:
    """(character, count), most frequent first, as sentencepiece counts them: whitespace as one `▁`,
    plus one `▁` a line (the prefix it puts before every sentence)."""
    spaces = sum(k for c, k in chars.items() if c.isspace()) + lines
    merged = Counter({c: k for c, k in chars.items() if not c.isspace()})
    merged[SPACE_PIECE] += spaces
    return tuple(sorted(merged.items(), key=lambda item: (-item[1], item[0])))
