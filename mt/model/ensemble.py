"""Ensembles of checkpoints: several models decoding as one.

`Ensemble` offers the interface search uses (`encode`, `decode_step` with a cache that has
`reorder` / `reorder_beams`, and `forward` for forced decoding), so greedy, beam search,
sampling and `mt score` run on it unchanged. Each member keeps its own decoder cache.

How the members are combined: the ensemble's next-token distribution is the mean of the
members' probabilities, p(y | x, prefix) = 1/M sum_m p_m(y | x, prefix), computed in log space
as logsumexp_m(log p_m) - log M. This is fairseq's choice (EnsembleModel averages
probabilities). The mixture is itself a normalised distribution at every step, so beam scores,
samples and forced-decoding scores of the ensemble are log-probabilities of one well-defined
model (the n-best scores equal its forced-decoding scores), and a token one member rules out
keeps the probability the others give it. The alternative, the mean of log-probabilities (a
product of experts, Marian's and OpenNMT's default), is not normalised unless renormalised at
every step, and lets any single member veto a token.

Memory layout: members may have different widths, so `encode` concatenates their encoder
memories along the last dimension, (B, S, D_1 + ... + D_M), and `decode_step` splits it again.
Search only selects rows of the memory, which this layout allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mt.data.tokenizer import Tokenizer
from mt.errors import MTError
from mt.model.transformer import Transformer


class EnsembleCache:
    """The members' decoder caches, in member order; rows move together."""

    def __init__(self, caches: tuple[Any, ...]) -> None:
        self.caches = caches

    def reorder(self, index: Tensor) -> EnsembleCache:
        """Select batch rows `index` (R',) long in every member's cache."""
        return EnsembleCache(tuple(c.reorder(index) for c in self.caches))

    def reorder_beams(self, index: Tensor) -> EnsembleCache:
        """Like `reorder`, for an index that only moves rows among one sentence's beams."""
        return EnsembleCache(tuple(c.reorder_beams(index) for c in self.caches))


class Ensemble(nn.Module):
    """M models with the same target vocabulary, decoding as the mean of their probabilities.

    Members need `encode`, `decode_step`, `forward` (the search interface) and `d_model`, the
    width of their encoder memory. `.eval()`, `.train()` and `.to()` act on every member.
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("Ensemble: needs at least one model")
        self.members = nn.ModuleList(members)
        self.widths = [int(m.d_model) for m in members]
        self.log_m = math.log(len(members))

    @property
    def max_positions(self) -> int:
        """The longest sequence every member can encode or decode."""
        return min(int(m.cfg.max_positions) for m in self.members)

    def combine(self, log_probs: Sequence[Tensor]) -> Tensor:
        """Members' log-probs (..., V) each -> log of their mean probability (..., V) float32."""
        if len(log_probs) == 1:
            return log_probs[0].float()  # exactly the member's: no rounding through logsumexp
        return torch.logsumexp(torch.stack([lp.float() for lp in log_probs]), dim=0) - self.log_m

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src, src_mask (B, S) -> the members' memories side by side (B, S, sum of D_m)."""
        return torch.cat([m.encode(src, src_mask) for m in self.members], dim=-1)

    def start_cache(self, memory: Tensor, src_mask: Tensor, group: int = 1) -> EnsembleCache:
        """Every member's empty decoder cache (`Transformer.start_cache`) over its part of memory
        (N, S, sum D_m), for N * group decoder rows."""
        return EnsembleCache(tuple(m.start_cache(mem, src_mask, group)
                                   for m, mem in zip(self.members, memory.split(self.widths, dim=-1))))

    def decode_step(self, tokens: Tensor, memory: Tensor, src_mask: Tensor,
                    cache: EnsembleCache | None) -> tuple[Tensor, EnsembleCache]:
        """tokens (R, 1), memory (R, S, sum D_m), src_mask (R, S) -> (log_probs (R, V) float32, cache)."""
        if cache is None:
            memories, caches = memory.split(self.widths, dim=-1), (None,) * len(self.members)
        else:  # the members' caches hold what they read of memory (beam search keeps a zero-width one)
            memories, caches = (memory,) * len(self.members), cache.caches
        outs = [m.decode_step(tokens, mem, src_mask, c) for m, mem, c in zip(self.members, memories, caches)]
        return self.combine([lp for lp, _ in outs]), EnsembleCache(tuple(c for _, c in outs))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced pass: tgt_in (B, T) -> the ensemble's log-probs (B, T, V) float32.

        They are normalised, so they also serve as logits (log_softmax leaves them unchanged)."""
        return self.combine([torch.log_softmax(m(src, src_mask, tgt_in).float(), dim=-1)
                             for m in self.members])


def max_positions(model: Transformer | Ensemble) -> int:
    """The longest source (with EOS) or target (with BOS) sequence `model` accepts."""
    return model.max_positions if isinstance(model, Ensemble) else int(model.cfg.max_positions)


def check_compatible(paths: Sequence[Path], tokenizers: Sequence[Tokenizer],
                     pairs: Sequence[Sequence[tuple[str, str]]]) -> None:
    """MTError naming both files when two checkpoints' tokenizers (hence vocabularies) differ, or
    when they translate other language pairs (`pairs`: each member's (source, target) languages):
    de->en and en->de models may share one joint sentencepiece model, and their mixture is garbage."""
    first = tokenizers[0].model_bytes()
    for path, tokenizer, langs in zip(paths[1:], tokenizers[1:], pairs[1:]):
        if tokenizer.model_bytes() != first:
            raise MTError(f"ensemble: {paths[0]} and {path} use different tokenizers or vocabularies; "
                          "only checkpoints trained on the same sentencepiece model can be ensembled")
        if list(langs) != list(pairs[0]):
            def named(p: Sequence[tuple[str, str]]) -> str:
                return ", ".join(f"{s}->{t}" for s, t in p)
            raise MTError(f"ensemble: {paths[0]} translates {named(pairs[0])} "
                          f"but {path} translates {named(langs)}; "
                          "only models of the same language pairs can be ensembled")
