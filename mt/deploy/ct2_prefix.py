"""A translator's typed target prefix (issue 73) on a CTranslate2 export (`CT2Translator.search_ids`
with prefix-only `Wanted`s, mt.decode.typed): CTranslate2's own `target_prefix` and
`return_alternatives`, no masks of mt's.

- **The complete words** (`Wanted.prefix`: the pieces forced up to the typed prefix's last space)
  are CTranslate2's `target_prefix`: its decoder is run over them and the search starts after.
- **The word being typed** (`Wanted.partial`) has no CTranslate2 equivalent: its search cannot be
  restricted to pieces that spell given letters. So the `ALTERNATIVES` most probable next pieces
  after the complete words are expanded and each continued by CTranslate2's own search
  (`return_alternatives`, one call a sentence: CTranslate2 takes no alternatives from a prefix in
  batch mode), and those whose pieces spell the typed letters (`spells`: what mt's rule 10 lets
  through) are kept. Where none does (the typed letters start a word the model ranks below the
  `ALTERNATIVES` best first pieces, or its first piece is continued otherwise), the typed word's
  spellings (`spellings`, at most `SPELLINGS`) are scored by one `score_batch` and the best one is
  added to `target_prefix` for one more search.
- **Ranking**: every kept output is re-scored with the model's own log-probs (`score_batch`, as
  `exact_scores`) and ranked by mt's length penalty (`SearchSettings.score`).

What is equal to `mt translate --prefix` on the .pt checkpoint and what is not: the complete words
are forced alike (the same pieces, at the model's own log-probs), and the continuation after them
is a beam search in both. mt spells the typed word inside one constrained beam search (beam at
least `CONSTRAINED_BEAM`, rows writing the word masked to the pieces that spell it, all rows
competing after it), while here each first piece's hypothesis is continued by its own search and
the best whole output is kept: the outputs agree where the best continuation of the typed word is
in both searches and can differ otherwise (tests/test_prefix_ct2.py: on a toy model trained to
reverse its input, 37 of 46 prefixes cut from its own outputs continued token for token alike, the
9 others all on one of its 8 sources). Alternatives after the prefix (`--alternatives`) are mt's
own model's only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mt.data.tokenizer import EOS_ID
from mt.decode.engine import Results
from mt.decode.rules import SearchSettings
from mt.decode.wanted import Wanted

CT2Translator = Any  # mt.deploy.ct2.CT2Translator (which imports this module)

ALTERNATIVES = 16  # first pieces after the complete words expanded and continued (return_alternatives)
SPELLINGS = 64  # spellings of a typed word scored where no alternative spells it


def spells(tokens: Sequence[int], wanted: Wanted) -> bool:
    """Whether `tokens` (an output, no BOS/EOS) start with `wanted.prefix` and then spell its typed
    word (`Wanted.partial`: each piece one the word allows at its character, until it is spelled)."""
    n = len(wanted.prefix)
    if tuple(tokens[:n]) != tuple(wanted.prefix):
        return False
    at = 0
    for token in tokens[n:]:
        if at >= len(wanted.partial):
            return True
        allowed = dict(wanted.partial[at])
        if token not in allowed:
            return False
        at += allowed[token]
    return at >= len(wanted.partial)


def spellings(partial: Sequence[Sequence[tuple[int, int]]], limit: int = SPELLINGS) -> list[tuple[int, ...]]:
    """Up to `limit` piece sequences that spell a typed word (`Wanted.partial`), shortest walks first."""
    if not partial:
        return [()]
    out: list[tuple[int, ...]] = []
    todo: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while todo and len(out) < limit:
        at, pieces = todo.pop(0)
        for piece, n in partial[at]:
            if at + n >= len(partial):
                out.append((*pieces, piece))
            else:
                todo.append((at + n, (*pieces, piece)))
    return out[:limit]


def continue_ids(ct2: CT2Translator, src_ids: list[list[int]], wanted: Sequence[Wanted],
                 settings: SearchSettings, options: dict[str, Any]) -> list[Results]:
    """For each source (ids without EOS), its `settings.n_best` outputs continuing its typed prefix
    (`wanted`), best first by mt's score of the model's own log-probs (module docstring); `options`:
    CTranslate2's for `settings` (`mt.deploy.ct2.ct2_options`)."""
    limits = ct2.max_lengths(src_ids, settings)
    out: list[Results] = []
    for ids, w, limit in zip(src_ids, wanted, limits):
        source = ct2._src_pieces([ids])[0]
        longest = max(limit, len(w.prefix) + len(w.partial)) + 1  # CTranslate2 counts the EOS step
        at = {"source": source, "longest": longest}
        kept = [hyp for hyp in _search(ct2, at, list(w.prefix), options, return_alternatives=True,
                                       num_hypotheses=ALTERNATIVES, min_alternative_expansion_prob=0.0)
                if spells(hyp, w)]
        if not kept:
            tries = [[*w.prefix, *spelled] for spelled in spellings(w.partial)]
            scores = ct2.score_ids([ids] * len(tries), tries)
            best = max(range(len(tries)), key=lambda i: sum(scores[i][:-1]))
            kept = [hyp for hyp in _search(ct2, at, tries[best], options) if spells(hyp, w)] or [tries[best]]
        kept = [list(hyp) for hyp in dict.fromkeys(map(tuple, kept))]
        log_probs = ct2.score_ids([ids] * len(kept), kept)
        scored = sorted(((hyp, settings.score(sum(lps), len(hyp))) for hyp, lps in zip(kept, log_probs)),
                        key=lambda h: -h[1])
        out.append(scored[:settings.n_best])
    return out


def _search(ct2: CT2Translator, at: dict[str, Any], forced: list[int], options: dict[str, Any],
            **extra: Any) -> list[list[int]]:
    """CTranslate2's search of `at["source"]` (its pieces) after the `forced` pieces
    (`target_prefix`), up to `at["longest"]` steps: its hypotheses as mt ids, EOS dropped."""
    prefix = ct2._tgt_pieces([forced])[0] if forced else None
    found = ct2.translator.translate_batch([at["source"]], target_prefix=[prefix],
                                           max_decoding_length=at["longest"], **{**options, **extra})[0]
    hyps = [[ct2._tgt_ids[p] for p in hyp] for hyp in found.hypotheses]
    return [hyp[:-1] if hyp and hyp[-1] == EOS_ID else hyp for hyp in hyps]
