"""A typed prefix's forced pieces decoded before the search, outside its steps (issue 73: the
latency of interactive completion).

In `mt.decode.constrained.constrained_beam_search` a forced piece is one search step: every one of
a sentence's K rows is decoded, K x V candidates gathered and ranked, K rows advanced, though the
step can only write that piece and only one row is live (the others hold -inf from the start).
`forced_start` feeds every row the pieces all the sentences of a batch force first (their
shortest prefix) through the decoder alone, adds up each piece's own log-prob on row 0 as the
search would (rule 9: at the model's own log-prob; the same float32 additions), and hands the
search a beam state that has already written them: row 0 holding the prefix and its score, the
others at -inf, the constraint rows as they start (a prefix meets no term). The decoder runs on
the same rows and shapes as the search's own steps, so row 0's numbers are the search's bit for
bit (a batched pass over the prefix, or one row a sentence, gives other roundings: scores differ
in their last digits); what is saved is the search's work around each step (candidates, ranking,
rules, reorders). Only where the batch holds nothing but prefixes and typed words (no glossary
term, nothing avoided or placed).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mt.data.tokenizer import BOS_ID
from mt.decode.beam import BeamState
from mt.decode.rules import SearchSettings
from mt.decode.search import Seq2Seq
from mt.decode.wanted import Wanted

FAST_PREFIX = True  # tests turn it off to compare
MIN_FORCED = 2  # forced pieces worth the detour


def forced_start(model: Seq2Seq, memory: Tensor, src_mask: Tensor, found: Sequence[Wanted], max_lens: Tensor,
                 settings: SearchSettings) -> BeamState | None:
    """The beam state after the forced pieces every sentence of the batch starts with (memory
    (N, S, D), src_mask (N, S), max_lens (N,)), or None where the search must write them itself."""
    start_cache = getattr(model, "start_cache", None)
    if not FAST_PREFIX or start_cache is None or any(w.require or w.avoid or w.place for w in found):
        return None
    forced = min(len(w.prefix) for w in found)
    if forced < MIN_FORCED or bool((max_lens < forced).any()):
        return None
    n, k, device = memory.size(0), settings.beam, memory.device
    pieces = torch.tensor([list(w.prefix[:forced]) for w in found], dtype=torch.long, device=device)  # (N, F)
    state = BeamState.start_cached(model, memory, src_mask, max_lens, settings)
    history = pieces.repeat_interleave(k, dim=0)  # (N*K, F): every row fed the forced pieces
    cache, total = state.cache, torch.zeros((n, 1), device=device)
    token = torch.full((n * k, 1), BOS_ID, dtype=torch.long, device=device)
    for t in range(forced):
        log_probs, cache = model.decode_step(token, state.memory, state.src_mask, cache)
        # row 0 of each sentence, as the search adds it (rule 9: the piece at its own log-prob)
        total = total + log_probs.float()[::k].gather(1, pieces[:, t:t + 1])
        token = history[:, t:t + 1].contiguous()
    state.cache, state.history, state.step = cache, history, forced
    state.scores[:, :1] = total
    return state
