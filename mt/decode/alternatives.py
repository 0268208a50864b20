"""Alternatives after a typed prefix (issue 73, CTranslate2's `return_alternatives`): the most
probable pieces at the first position after each sentence's forced prefix, by one teacher-forced
pass over the prefix (`next_pieces`). The pipeline's alternatives stage continues each to a whole
translation (mt.decode.pipeline) and keeps one a distinct next word.

**The probability reported** with each alternative is the model's probability of its first piece
at that position, P(piece | source, prefix), the model's own softmax over the whole vocabulary
(not renormalised over the pieces a typed word allows; so a row's probabilities sum to at most 1).
For a word of one piece (most words of a Multi30k-sized vocabulary) that is the word's
probability. For a word the continuation spells in several pieces it is the probability of its
first piece: an upper bound of the word's, since the spelled word's probability is the product of
its pieces' (P(▁f) P(ähr | ▁f) P(t | ▁fähr)), which would take the continuation's per-piece
log-probs (one more forced pass) and is not computed. Two words that start with the same piece are
one alternative (the first kept). CTranslate2's `return_alternatives` expands the same thing
(the `num_hypotheses` best pieces at the position after `target_prefix`, one beam step, then each
continued by the search) but reports each alternative with its whole hypothesis' score (the sum of
its log-probs, or that divided by its length), not a per-position probability; mt reports the
per-position one, because it is the number a completion box shows beside the word.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode.search import Seq2Seq
from mt.decode.wanted import Wanted

NEG_INF = float("-inf")


def next_pieces(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, wanted: Sequence[Wanted],
                k: int) -> list[list[tuple[int, float]]]:
    """For each sentence (src, src_mask: (B, S)), the `k` most probable pieces right after its
    forced prefix (`Wanted.prefix`), only those its typed word allows there (`Wanted.partial`), never
    PAD, BOS, UNK or EOS: (piece id, log-prob) best first, the model's own log-probs."""
    if not wanted:
        return []
    width = max(len(w.prefix) for w in wanted) + 1
    tgt_in = torch.full((len(wanted), width), PAD_ID, dtype=torch.long, device=src.device)
    for i, w in enumerate(wanted):
        tgt_in[i, :len(w.prefix) + 1] = torch.tensor([BOS_ID, *w.prefix], dtype=torch.long)
    at = torch.tensor([len(w.prefix) for w in wanted], device=src.device)
    log_probs = torch.log_softmax(model.forward(src, src_mask, tgt_in).float(), dim=-1)  # (B, T, V)
    last = log_probs[torch.arange(len(wanted), device=src.device), at]  # (B, V)
    last[:, [PAD_ID, BOS_ID, UNK_ID, EOS_ID]] = NEG_INF
    for i, w in enumerate(wanted):
        if w.partial:
            allowed = torch.zeros(last.size(1), dtype=torch.bool, device=src.device)
            allowed[[t for t, _ in w.partial[0]]] = True
            last[i].masked_fill_(~allowed, NEG_INF)
    values, ids = last.topk(min(k, last.size(1)), dim=1)
    return [[(t, v) for t, v in zip(row_ids, row_values) if v > NEG_INF]
            for row_ids, row_values in zip(ids.tolist(), values.tolist())]
