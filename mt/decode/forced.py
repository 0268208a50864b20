"""Forced decoding: the model's log-probability of given translations (`mt score`).

Scoring sentence pairs is how a trained model filters a noisy corpus or reranks an n-best
list. The conventions are search's (see mt/decode/search.py): a target `y` is scored as the n + 1
decisions `y_1 .. y_n EOS` after BOS, `log_prob` sums their log-probabilities, and the
length-normalised score divides it by the decode config's length penalty of |y| = n + 1,
so scoring a beam search output gives back exactly that hypothesis' `log_prob` and `score`.
Scores come from the full (uncached) teacher-forced decoder, an independent check of the
cached incremental decoding that search uses.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from mt.config import DecodeConfig
from mt.data.batching import collate_source, pair_batches
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from mt.decode.search import Seq2Seq, length_penalty
from mt.errors import MTError, MTWarning
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer


def force_decode_score(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, tgt: list[list[int]]) -> torch.Tensor:
    """Log-probability of each target `y EOS` under teacher forcing with the full (uncached)
    decoder. `model` has the search interface (a Transformer, an Ensemble, a test double);
    src, src_mask: (B, S); tgt: B token lists without BOS/EOS -> (B,) float32."""
    batch = len(tgt)
    width = max((len(t) for t in tgt), default=0) + 1
    tgt_in = torch.full((batch, width), PAD_ID, dtype=torch.long, device=src.device)  # BOS y PAD..
    tgt_out = torch.full((batch, width), PAD_ID, dtype=torch.long, device=src.device)  # y EOS PAD..
    for i, seq in enumerate(tgt):
        tgt_in[i, : len(seq) + 1] = torch.tensor([BOS_ID, *seq], dtype=torch.long)
        tgt_out[i, : len(seq) + 1] = torch.tensor([*seq, EOS_ID], dtype=torch.long)
    log_probs = torch.log_softmax(model.forward(src, src_mask, tgt_in).float(), dim=-1)  # (B, T, V)
    picked = log_probs.gather(2, tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
    lengths = torch.tensor([len(t) for t in tgt], device=src.device)
    real = torch.arange(width, device=src.device).unsqueeze(0) <= lengths.unsqueeze(1)  # (B, T) y and EOS
    return picked.masked_fill(~real, 0.0).sum(dim=1)


@dataclass(frozen=True)
class PairScore:
    """One pair's forced-decoding score."""

    log_prob: float  # sum over the |y| + 1 scored decisions, EOS included
    length: int  # |y| + 1: target pieces plus EOS
    normalized: float  # log_prob / length_penalty(|y| + 1): beam search's `score` for this output

    @property
    def per_token(self) -> float:
        """Average log-probability per scored decision."""
        return self.log_prob / self.length


def score_pairs(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    decode: DecodeConfig,
    *,
    max_positions: int,
    device: torch.device | str,
    progress: bool = False,
) -> list[PairScore]:
    """Score raw (source, target) line pairs under forced decoding -> one PairScore per pair, in
    input order. `model` is a Transformer or an Ensemble; `max_positions` its sequence limit.

    Pairs run in length-sorted batches of at most `decode.max_tokens` padded source plus target
    tokens; normalisation uses `decode.length_penalty` and `decode.alpha`. Sources longer than
    the model accepts are truncated with a warning, as translation does; a target longer than
    the model can decode is an MTError naming its line. The model runs in eval mode under
    `torch.inference_mode()` and its train/eval mode is restored.
    """
    if len(src_lines) != len(tgt_lines):
        raise MTError(f"scoring: {len(src_lines)} source lines but {len(tgt_lines)} target lines")
    length_penalty(1.0, alpha=decode.alpha, kind=decode.length_penalty)  # check the kind before any work
    src_ids = tokenizer.encode_src(list(src_lines))
    tgt_ids = tokenizer.encode_tgt(list(tgt_lines))
    limit = max_positions - 1  # the source gets an EOS, the decoder input a BOS
    if any(len(seq) > limit for seq in src_ids):
        warnings.warn(f"source lines longer than {limit} pieces are truncated", MTWarning, stacklevel=2)
        src_ids = [seq[:limit] for seq in src_ids]
    for number, seq in enumerate(tgt_ids, start=1):
        if len(seq) > limit:
            raise MTError(f"target line {number}: {len(seq)} pieces, more than the model's limit of {limit}")
    batches = pair_batches(np.array([len(s) for s in src_ids]), np.array([len(t) for t in tgt_ids]),
                           max_tokens=decode.max_tokens, max_sentences=decode.max_tokens)
    log_probs = [0.0] * len(src_ids)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(src_ids), disable=not progress, file=sys.stderr,
                                          unit="pair", desc="score") as bar:
            for batch in batches:
                rows = batch.tolist()
                src, src_mask = collate_source([src_ids[i] for i in rows])
                scores = force_decode_score(model, src.to(device), src_mask.to(device), [tgt_ids[i] for i in rows])
                for row, value in zip(rows, scores.tolist()):
                    log_probs[row] = value
                bar.update(len(rows))
    finally:
        model.train(was_training)
    results = []
    for value, seq in zip(log_probs, tgt_ids):
        n = len(seq) + 1
        penalty = float(length_penalty(float(n), alpha=decode.alpha, kind=decode.length_penalty))
        results.append(PairScore(value, n, value / penalty))
    return results
