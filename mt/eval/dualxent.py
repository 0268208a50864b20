"""Dual conditional cross-entropy (Junczys-Dowmunt 2018, "Dual Conditional Cross-Entropy Filtering
of Noisy Parallel Corpora", the best system of the WMT18 corpus-filtering task): score each pair
with a model in each direction.

For a pair (x, y), H_A = -log P_A(y | x) / (|y| + 1) under the forward model and
H_B = -log P_B(x | y) / (|x| + 1) under the backward model, both per scored token, EOS included
(mt.decode.forced's `per_token`, the code path of `mt score`). The pair's cost is

    |H_A - H_B| + (H_A + H_B) / 2

low when both models find the pair likely and agree about it; a misaligned or wrong-language pair
is unlikely under both, a copy is likely one way only. The score is exp(-cost) in (0, 1], higher
is better, which `mt data clean --keep` ranks by (the paper's adequacy score; its language-ID and
cross-entropy-difference factors are left to mt.data.clean's langid rule and the domain here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.forced import score_pairs
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer


@dataclass(frozen=True)
class Direction:
    """One scoring model: its network, its tokenizer for the target language, its length limit."""

    model: Transformer | Ensemble
    tokenizer: Tokenizer
    max_positions: int


def dual_xent_cost(h_forward: np.ndarray, h_backward: np.ndarray) -> np.ndarray:
    """|H_A - H_B| + (H_A + H_B) / 2 per pair (per-token cross-entropies in nats, >= 0)."""
    return np.abs(h_forward - h_backward) + 0.5 * (h_forward + h_backward)


class DualXent:
    """Scores (sources, targets) -> exp(-dual conditional cross-entropy) per pair, higher = better."""

    def __init__(self, forward: Direction, backward: Direction, decode: DecodeConfig,
                 device: torch.device | str):
        self.forward, self.backward, self.decode, self.device = forward, backward, decode, device

    def _cross_entropy(self, d: Direction, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        # A pair longer than the model can score costs infinity (it is dropped) instead of stopping the run.
        limit = d.max_positions - 1
        encoded = zip(d.tokenizer.encode_src(list(src)), d.tokenizer.encode_tgt(list(tgt)))
        fits = [i for i, (s, t) in enumerate(encoded) if len(t) <= limit]
        out = np.full(len(src), math.inf)
        if not fits:
            return out
        found = score_pairs(d.model, d.tokenizer, [src[i] for i in fits], [tgt[i] for i in fits], self.decode,
                            max_positions=d.max_positions, device=self.device)
        out[fits] = [-s.per_token for s in found]
        return out

    def costs(self, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        """Dual conditional cross-entropy per pair (nats per token; lower = better)."""
        h_a = self._cross_entropy(self.forward, src, tgt)
        h_b = self._cross_entropy(self.backward, tgt, src)
        return dual_xent_cost(h_a, h_b)

    def __call__(self, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        return np.exp(-self.costs(src, tgt))
