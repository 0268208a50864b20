"""The loop guard: what keeps a search from looping, and the check that flags an output that loops anyway.

A model trained for minutes loops on input unlike its corpus (`Ein ha ha ha ha ha harzzte`,
`Ein MAAAAAIIINAAAAAAAASSSSSSSSSS`); CTranslate2 and Hugging Face `generate` offer the same two
guards, and both are applied to the log-probs of every search step (greedy, beam, constrained
and sampling: `mt.decode.rules.apply_rules` calls `guard_repeats`), on the device, one vectorised
pass over each row's history (no loop over rows or over the vocabulary):

- `no_repeat_ngram_size` n (0 = off): a token that would complete an n-gram of target pieces the
  hypothesis already holds is banned (-inf), as fairseq, Hugging Face and CTranslate2 do it. A
  hypothesis then holds every n-gram of pieces at most once: a run of one piece is at most n long.
  A ban changes nothing where it does not fire: an output without a repeated n-gram comes out of
  greedy search byte-identical (beam search can differ when the ban removed a rival hypothesis).
- `repetition_penalty` θ (1 = off): a token the hypothesis already holds has its log-prob
  multiplied by θ (its probability p becomes p^θ, CTRL's penalty applied to log-probs, which are
  never positive). Unlike a ban it changes the scores: the hypothesis' `log_prob` is then the sum of
  the penalised values, not what forced decoding gives. CTranslate2 applies the same θ to logits.

`repetition_excess(source, output)` is the check on the text that comes out: how far the output
repeats one word, or runs one character, beyond what the source does (0 when it does not), the
signal `mt.decode.confidence` turns into a low confidence.

The retry (`decode.text.loop_retry`): a sentence whose output the check still flags, with the guard on,
is searched again with the guard at its strictest (`retry_decode`: no target piece twice) and keeps
that output where it repeats less (`retry_wins`). Banning every repeated piece is too strict for every
sentence (n = 2 already cost the demo model 0.9 val BLEU), so it is tried only where the usual
guard let a loop through: "I" -> "I I Ichchch I I" becomes "Ich". The retry belongs to the text a
person sends (`translate_texts*`, the server), with the span, case and ending rules: `translate_lines`
and `mt evaluate` stay the plain search, as mt's exports (CTranslate2, `transformers`) run it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import torch

from mt.config import DecodeConfig

WORD = re.compile(r"\w+", re.UNICODE)
# A run of one character counts when it is longer than this, and longer than the source's longest:
# German writes three equal letters in a row (Schifffahrt, Teeei), never four.
CHAR_RUN_FREE = 3
# A unit of 2-4 letters repeated back to back more often than this is a loop (`Zererer`, `Tototo`);
# twice is German (`Bananen`, `nenne`).
UNIT_REPEATS_FREE = 2
_UNIT = re.compile(r"([^\W\d_]{2,4}?)\1{2,}", re.UNICODE)  # letters only: 1000000 is a number
# A word repeated up to this many times more than the source's most repeated word is normal
# (`ein Mann und ein Hund`: the source has `a man and a dog`, but the article repeats by gender too).
WORD_COUNT_FREE = 1
# The loop guard a looping output is searched again with: no target piece twice.
RETRY_NGRAM = 1


def ban_repeated_ngrams(log_probs: torch.Tensor, history: torch.Tensor, size: int) -> torch.Tensor:
    """In place: in each row, the tokens that would complete an n-gram (n = `size`) the row's history
    already holds get -inf. log_probs: (R, V); history: (R, t) long, the tokens each row has emitted
    (no BOS). `size` 0 bans nothing; 1 bans every token already emitted.

    The windows of the history (R, t-n+1, n) whose first n-1 tokens equal the row's last n-1 name the
    banned token (their last); one `scatter_reduce` (amin) writes -inf there and leaves the others,
    so a token that ends a matching and a non-matching window is banned whatever the order."""
    t = history.size(1)
    if size <= 0 or t < size:
        return log_probs
    windows = history.unfold(1, size, 1)  # (R, W, n)
    match = (windows[:, :, :size - 1] == history[:, t - size + 1:].unsqueeze(1)).all(dim=2)  # (R, W)
    inf = torch.tensor(float("inf"), dtype=log_probs.dtype, device=log_probs.device)
    log_probs.scatter_reduce_(1, windows[:, :, size - 1], torch.where(match, -inf, inf), reduce="amin")
    return log_probs


def penalise_repeats(log_probs: torch.Tensor, history: torch.Tensor, penalty: float) -> torch.Tensor:
    """In place: each row's log-prob of every token in its history (R, t) multiplied by `penalty`
    (> 1 lowers them; 1 changes nothing). A token emitted twice is penalised once: every copy of it
    writes the same value, gathered before any write."""
    if penalty == 1.0 or history.size(1) == 0:
        return log_probs
    log_probs.scatter_(1, history, log_probs.gather(1, history) * penalty)
    return log_probs


def guard_repeats(log_probs: torch.Tensor, history: torch.Tensor, *, no_repeat_ngram_size: int,
                  repetition_penalty: float) -> torch.Tensor:
    """Both guards on one step's log-probs (R, V) for rows with `history` (R, t), in place: the
    penalty, then the n-gram ban. What `mt.decode.rules.apply_rules` runs after the banned tokens."""
    penalise_repeats(log_probs, history, repetition_penalty)
    return ban_repeated_ngrams(log_probs, history, no_repeat_ngram_size)


def _longest_run(text: str) -> int:
    """The longest run of one character in `text` (spaces and digits do not count: `    ` and
    `1000` are layout and numbers, not loops)."""
    best, run, last = 0, 0, ""
    for char in text:
        run = run + 1 if char == last else 1
        last = char
        if not char.isspace() and not char.isdigit():
            best = max(best, run)
    return best


def _most_repeated(text: str) -> int:
    """How often the most frequent word of `text` occurs (case-folded), 0 without words."""
    counts: dict[str, int] = {}
    for word in WORD.findall(text.casefold()):
        counts[word] = counts.get(word, 0) + 1
    return max(counts.values(), default=0)


def _unit_repeats(text: str) -> int:
    """The most times a unit of 2-4 word characters repeats back to back in `text` (0 without any
    unit repeated three times or more: shorter repeats are not looked at)."""
    return max((len(m.group(0)) // len(m.group(1)) for m in _UNIT.finditer(text)), default=0)


def repetition_excess(source: str, output: str) -> int:
    """How far `output` repeats beyond its source: the largest of (its longest run of one character
    beyond max(CHAR_RUN_FREE, the source's longest run)), (its most repeated word's count beyond the
    source's most repeated word's count + WORD_COUNT_FREE) and (its most repeated unit of 2-4 letters
    beyond max(UNIT_REPEATS_FREE, the source's)). 0: no loop; 1 or more: a loop, larger the longer it
    ran. Linear in the two texts (the unit pattern's lazy repeat is bounded by 4 characters)."""
    runs = _longest_run(output) - max(CHAR_RUN_FREE, _longest_run(source))
    words = _most_repeated(output) - (_most_repeated(source) + WORD_COUNT_FREE)
    units = _unit_repeats(output) - max(UNIT_REPEATS_FREE, _unit_repeats(source))
    return max(0, runs, words, units)


def retry_decode(decode: DecodeConfig) -> DecodeConfig | None:
    """The settings a sentence whose output still loops is searched again with: `decode` with no
    target piece twice (`RETRY_NGRAM`). None where nothing is retried: `decode.text.loop_retry` off, the
    guard off (a user who switched it off wants the plain search), sampling (a draw is not a search
    to correct), or the guard already at its strictest."""
    search = decode.search
    guarded = search.no_repeat_ngram_size > 0 or search.repetition_penalty != 1.0
    strictest = search.no_repeat_ngram_size == RETRY_NGRAM
    if not decode.text.loop_retry or not guarded or search.sampling or strictest:
        return None
    return dataclasses.replace(decode, search=dataclasses.replace(search, no_repeat_ngram_size=RETRY_NGRAM))


def to_retry(decode: DecodeConfig, sources: Sequence[str], outputs: Sequence[str],
             exempt: Callable[[int], bool] | None = None) -> tuple[DecodeConfig | None, list[int]]:
    """(`retry_decode(decode)`, the indices of the outputs that repeat beyond their sources:
    `repetition_excess` > 0, those `exempt` names left out); (None, []) where nothing is retried."""
    strict = retry_decode(decode)
    if strict is None:
        return None, []
    rows = [i for i, (source, output) in enumerate(zip(sources, outputs))
            if repetition_excess(source, output) > 0]
    return strict, [i for i in rows if exempt is None or not exempt(i)]


def retry_wins(source: str, first: str, retried: str) -> bool:
    """Whether the retried output repeats less than the first (ties keep the first: the usual search's)."""
    return repetition_excess(source, retried) < repetition_excess(source, first)
