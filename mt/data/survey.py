"""What a recipe needs to know of a corpus, read in one pass: pairs, words per side, the script
each side is written in, distinct words and duplicate pairs (`survey`).

Words are whitespace-separated tokens (a sentencepiece model does not exist yet); for text
written without spaces (Han, Kana, Thai ...) characters stand in for words, so the counts stay
comparable. Scripts are counted over the letters of the first `SCRIPT_SAMPLE` lines of each side
(`mt.data.clean_rules.SCRIPT_RANGES`); the most frequent one names the side.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from mt.data.clean_rules import SCRIPT_RANGES
from mt.errors import MTError

SCRIPT_SAMPLE = 5000  # lines per side whose letters decide its script
_SCRIPTS = {name: re.compile("[" + chars + "]") for name, chars in SCRIPT_RANGES.items()}
_UNSPACED = ("Han", "Kana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")  # written without spaces between words
MAX_TYPES = 2_000_000  # distinct words counted per side at most (memory); beyond it the count is a floor


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
    for src, tgt in pairs:
        for side, text in enumerate((src, tgt)):
            if n < SCRIPT_SAMPLE:
                for name, pattern in _SCRIPTS.items():
                    letters[side][name] += len(pattern.findall(text))
                if n == SCRIPT_SAMPLE - 1:
                    unspaced[side] = _script(letters[side]) in _UNSPACED
            tokens = _words(text, unspaced[side] or (n < SCRIPT_SAMPLE and _script(letters[side]) in _UNSPACED))
            words[side] += len(tokens)
            if len(types[side]) < MAX_TYPES:
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
    return CorpusSurvey(n, words[0], words[1], len(types[0]), len(types[1]), _script(letters[0]),
                        _script(letters[1]), dup)
