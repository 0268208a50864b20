"""The recipe's tokenizer keys, read per side as each side's script requires (`choose_vocab`):
the vocabulary size and `character_coverage` of each sentencepiece model, joint or separate,
byte fallback and the normalisation of character widths, each with its reason.

The rule (L = literature, M = measured here, J = judgement):

- **Units** (L, J): a side written with spaces is sized from its distinct words; a side written
  without them (Han, Kana, Thai, Lao, Khmer, Myanmar, Tibetan) from its distinct characters plus
  its frequent character bigrams (`mt.data.survey`), since a count of "words" split at spaces sees
  a whole sentence as one word there. Half as many pieces as units, at most 8k up to 1M pairs
  (`mt.train.recipe.corpus_vocab`), at most the output cap of the model's rung.
- **Coverage** (L): sentencepiece's own guidance, 0.9995 for scripts with thousands of characters
  (Han, Kana, Hangul), 1.0 elsewhere; a joint model takes the lower of its two sides'.
- **The floor** (M: sentencepiece refuses less): every character the coverage keeps needs a piece
  of its own, and so do the 256 byte pieces of `byte_fallback` and the special pieces. A side's
  vocabulary is at least `ROOM` times that (room for pieces longer than one character), in steps
  of 500, whatever the units or the rung's output cap ask: the tool never chooses a size its own
  tokenizer training refuses (issue 61: 2,000 pieces for a Chinese target of 3,587 characters).
- **Too many characters** (L, J): when the coverage would keep more than `MAX_CHAR_PIECES`
  characters (a corpus of rare names in Han), the coverage is lowered to the share of the text
  that many of the most frequent characters cover (never below 0.98, the least sentencepiece's
  trainer accepts: past that the floor grows instead), and the rest is spelled in UTF-8 byte
  pieces (`byte_fallback`): a recipe with a reason, not an error.
- **Joint or separate** (L): one vocabulary when both sides are written in one script, or both in
  Han and Kana (Chinese and Japanese share their Han characters); a vocabulary each otherwise.
- **Widths** (L, J): a side in Han, Kana or Hangul gets the `cjk_width` normalisation (full-width
  Latin letters and digits to ASCII, half-width katakana to full-width; CJK punctuation such as
  ，。！？ kept as written), compiled into the sentencepiece model so that training and
  translation normalise alike; other corpora keep `identity`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from mt.data.survey import CorpusSurvey

# Scripts with thousands of characters: sentencepiece's documented coverage for them.
LARGE_CHARSETS = ("Han", "Kana", "Hangul")
LARGE_COVERAGE = 0.9995
BYTE_PIECES = 256  # byte_fallback's <0x00> ... <0xFF>
SPECIAL_PIECES = 4  # <pad> <unk> <s> </s>
ROOM = 1.25  # pieces per piece the floor requires: room for pieces longer than one character
MAX_CHAR_PIECES = 8000  # at most this many characters get a piece of their own; the rest are bytes
MIN_COVERAGE = 0.98  # the lowest character_coverage sentencepiece's trainer accepts
_CJK_FAMILY = {"Han", "Kana"}
# The size a side's units ask for (half of them, capped), and a phrase saying how: (units) -> (size, phrase).
WantedSize = Callable[[int], tuple[int, str]]


@dataclass(frozen=True)
class SideVocab:
    """One sentencepiece model's size and coverage, and why."""

    size: int
    coverage: float
    reason: str  # for vocab_size
    coverage_reason: str


def chars_kept(counts: tuple[tuple[str, int], ...], coverage: float) -> int:
    """How many characters sentencepiece keeps at `coverage`: the most frequent ones, up to the first
    whose running total reaches that share of all characters (its trainer's rule)."""
    total = sum(k for _, k in counts)
    running = kept = 0
    for _, k in counts:
        if total and running / total >= coverage:
            break
        running += k
        kept += 1
    return kept


def coverage_of(counts: tuple[tuple[str, int], ...], chars: int) -> float:
    """The coverage that keeps `chars` characters: the share of the text they cover, rounded down
    to 4 decimals."""
    total = sum(k for _, k in counts) or 1
    share = sum(k for _, k in counts[:chars]) / total
    return int(share * 10_000) / 10_000


def _round_up(size: float) -> int:
    return int(-(-size // 500) * 500)


def _side(counts: tuple[tuple[str, int], ...], scripts: tuple[str, ...], wanted: int, why: str,
          extra_pieces: int) -> SideVocab:
    """The size and coverage of one model over `counts`, `wanted` pieces by its units (`why`)."""
    coverage = LARGE_COVERAGE if any(s in LARGE_CHARSETS for s in scripts) else 1.0
    if coverage < 1:
        cov_why = (f"{'/'.join(scripts)}: 0.9995, sentencepiece's figure for scripts of thousands of "
                   f"characters")
    else:
        cov_why = f"{'/'.join(s or '?' for s in scripts)}: every character (sentencepiece's 1.0)"
    kept = chars_kept(counts, coverage) if counts else 0
    if kept > MAX_CHAR_PIECES:
        coverage = max(MIN_COVERAGE, coverage_of(counts, MAX_CHAR_PIECES))
        kept = chars_kept(counts, coverage)
        least = f" ({MIN_COVERAGE:g} is the least sentencepiece accepts)" if coverage == MIN_COVERAGE else ""
        cov_why = (f"{len(counts):,} distinct characters: the {kept:,} most frequent cover {coverage:.2%} "
                   "of the text and get a piece each; the rarer ones are spelled in UTF-8 byte pieces "
                   "(byte_fallback)" + least)
    floor = _round_up(ROOM * (kept + BYTE_PIECES + SPECIAL_PIECES + extra_pieces)) if counts else 0
    size = max(wanted, floor)
    reason = why
    if floor > wanted:
        reason += (f"; raised to {floor:,}: the {kept:,} characters that coverage {coverage:g} keeps "
                   f"need a piece each, plus {BYTE_PIECES} byte pieces and the specials, "
                   f"and room for longer pieces")
    elif counts:
        reason += f" (at least {floor:,}: {kept:,} characters at coverage {coverage:g} plus byte pieces)"
    return SideVocab(size, coverage, reason, cov_why)


def joint_scripts(s: CorpusSurvey) -> bool:
    """One vocabulary for both sides: one script, or Chinese and Japanese (Han and Kana)."""
    return s.shared_script or {s.src_script, s.tgt_script} <= _CJK_FAMILY


def _merged(a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    total: Counter[str] = Counter(dict(a))
    total.update(dict(b))
    return tuple(sorted(total.items(), key=lambda item: (-item[1], item[0])))


def choose_vocab(s: CorpusSurvey, wanted: WantedSize,
                 extra_pieces: int = 0) -> tuple[SideVocab, SideVocab | None]:
    """(the joint or target model's vocabulary, the source model's or None when joint).

    `wanted(units)` is the size the units alone ask for (half, capped) and a phrase saying so;
    `extra_pieces`: control symbols the source model adds (target tags)."""
    unit = {True: "distinct characters and frequent character pairs", False: "distinct words"}
    if joint_scripts(s):
        units = s.src_types + s.tgt_types
        size, why = wanted(units)
        if s.src_unspaced == s.tgt_unspaced:
            what = unit[s.src_unspaced]
        else:
            what = "distinct words, characters and pairs"
        joint = _side(_merged(s.src_char_counts, s.tgt_char_counts), (s.src_script, s.tgt_script),
                      size, f"{s.pairs:,} pairs, {units:,} {what} (both sides): {why}", extra_pieces)
        return joint, None
    tgt_size, tgt_why = wanted(s.tgt_types)
    src_size, src_why = wanted(s.src_types)
    tgt = _side(s.tgt_char_counts, (s.tgt_script,), tgt_size,
                f"target: {s.pairs:,} pairs, {s.tgt_types:,} {unit[s.tgt_unspaced]}: {tgt_why}", 0)
    src = _side(s.src_char_counts, (s.src_script,), src_size,
                f"source: {s.src_types:,} {unit[s.src_unspaced]}: {src_why}", extra_pieces)
    return tgt, src


def width_normalisation(s: CorpusSurvey) -> tuple[str, str]:
    """(tokenizer.normalization, its reason)."""
    cjk = [script for script in (s.src_script, s.tgt_script) if script in LARGE_CHARSETS]
    if cjk:
        return "cjk_width", (f"{'/'.join(dict.fromkeys(cjk))}: full-width Latin letters and digits read "
                             "as ASCII, half-width katakana as full-width, CJK punctuation kept; "
                             "the same rule in training and translation (it is compiled into the tokenizer)")
    return "identity", "text as written (full-width punctuation and runs of spaces kept)"



MAX_LEN_RATIO = 9.0  # mt's default: pairs whose lengths in pieces differ more than this are dropped


def length_ratio(s: CorpusSurvey) -> tuple[float, str]:
    """(data.max_len_ratio, its reason): mt's 9 in pieces, loosened to 3 times the corpus's mean
    ratio of units (words, or characters of unspaced text) where that is more, since characters
    against words run to several per word (Japanese: ~2.3 characters per English word)."""
    ratio = max(s.src_words, s.tgt_words) / max(1, min(s.src_words, s.tgt_words))
    unit = {True: "characters", False: "words"}
    value = max(MAX_LEN_RATIO, round(3 * ratio))
    loosened = "" if value == MAX_LEN_RATIO else " (3 times the mean ratio)"
    return float(value), (f"{s.tgt_words / max(1, s.src_words):.1f} target {unit[s.tgt_unspaced]} "
                          f"per source {unit[s.src_unspaced][:-1]} on average: pairs whose lengths in pieces "
                          f"differ more than {value:g} times are dropped" + loosened)
