"""Translating raw text with a trained model: the library behind `mt translate`, `mt evaluate`,
validation BLEU and the attention plot.

Encode with the source sentencepiece model, batch sentences of similar length
(`mt.batching.decode_batches`), run the search the `DecodeConfig` asks for (`search_batch`:
greedy for beam 1, else beam search), put the results back in input order and detokenise with
the target model. An empty input line gives an empty output line without running the model, so
outputs always line up with inputs. Nothing here prints except a progress bar on request; a
source line too long for the model is cut and reported as an `MTWarning`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar, overload

import numpy as np
import torch
from tqdm import tqdm

from mt.batching import collate_source, decode_batches
from mt.checkpoint import load_for_inference
from mt.config import Config, DecodeConfig
from mt.distributed import resolve_device
from mt.errors import MTError, MTWarning
from mt.model import Transformer
from mt.search import Hypothesis, beam_search, greedy_search
from mt.tokenizer import Tokenizer

T = TypeVar("T")


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.
    An --n-best above the configured beam raises the beam to it unless --beam was given too;
    without --n-best the config's decode.n_best counts (at most --beam when that is given)."""
    for flag, value in (("--beam", beam), ("--n-best", n_best), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise MTError(f"{flag}: must be at least 1, got {value}")
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        raise MTError(f"--alpha: must be a finite number >= 0, got {alpha}")
    if n_best is None:
        n_best = base.n_best if beam is None else min(base.n_best, beam)
    decode = dataclasses.replace(
        base,
        beam=base.beam if beam is None else beam,
        alpha=base.alpha if alpha is None else alpha,
        n_best=n_best,
        max_tokens=base.max_tokens if max_tokens is None else max_tokens,
    )
    if decode.n_best > decode.beam:
        if beam is not None:
            raise MTError(f"--n-best {decode.n_best} exceeds --beam {decode.beam}")
        decode = dataclasses.replace(decode, beam=decode.n_best)
    return decode


def load_model(checkpoint: Path, device: str) -> tuple[Transformer, Tokenizer, Config, torch.device]:
    """(model in eval mode, tokenizer, config, device) from a checkpoint; device as in --device."""
    dev = resolve_device(device, local_rank=0)
    model, tokenizer, cfg = load_for_inference(checkpoint, dev)
    return model, tokenizer, cfg, dev


@overload
def search_batch(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: None = None) -> list[list[int]]: ...
@overload
def search_batch(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: int) -> list[list[Hypothesis]]: ...
def search_batch(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: int | None = None) -> list[list[int]] | list[list[Hypothesis]]:
    """The search `decode` asks for over one batch. src, src_mask: (B, S) on the model's device.

    Without `n_best`: the best output's tokens per sentence (no BOS/EOS), by greedy search when
    decode.beam == 1, else by beam search. With `n_best`: each sentence's `n_best` hypotheses
    with their scores, best first, by beam search (also for beam 1). Outputs stay below the
    model's max_positions. The caller chooses train/eval mode and gradient tracking.
    """
    limit = model.cfg.max_positions - 1
    if n_best is None and decode.beam == 1:
        return greedy_search(model, src, src_mask, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                             forbid_unk=decode.forbid_unk, max_len_limit=limit)
    found = beam_search(model, src, src_mask, beam=decode.beam, alpha=decode.alpha,
                        length_penalty=decode.length_penalty, max_len_a=decode.max_len_a,
                        max_len_b=decode.max_len_b, n_best=1 if n_best is None else n_best,
                        forbid_unk=decode.forbid_unk, max_len_limit=limit)
    return [hyps[0].tokens for hyps in found] if n_best is None else found


def _map_sentences(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool,
    search: Callable[[torch.Tensor, torch.Tensor], list[T]],
    empty: T,
) -> list[T]:
    """Run `search(src (B, S), src_mask (B, S)) -> B results` over length-sorted batches of the
    encoded lines; results come back in input order, `empty` for lines without any token."""
    ids = tokenizer.encode_src(list(lines))
    limit = model.cfg.max_positions - 1  # the source gets an EOS; longer input cannot be encoded
    if any(len(seq) > limit for seq in ids):
        warnings.warn(f"source lines longer than {limit} pieces are truncated", MTWarning, stacklevel=3)
        ids = [seq[:limit] for seq in ids]
    todo = np.array([i for i, seq in enumerate(ids) if seq], dtype=np.int64)
    results: list[T] = [empty] * len(ids)
    lengths = np.array([len(ids[i]) for i in todo], dtype=np.int64)
    # decode.max_tokens bounds source tokens times the beam: beam search runs B * beam rows.
    budget = max(1, decode.max_tokens // decode.beam)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(ids), disable=not progress, file=sys.stderr,
                                          unit="sent", desc="translate") as bar:
            bar.update(len(ids) - len(todo))
            for batch in decode_batches(lengths, max_tokens=budget, max_sentences=budget):
                rows = todo[batch]
                src, src_mask = collate_source([ids[i] for i in rows])
                for row, result in zip(rows.tolist(), search(src.to(device), src_mask.to(device))):
                    results[row] = result
                bar.update(len(rows))
    finally:
        model.train(was_training)
    return results


def translate_lines(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
) -> list[str]:
    """Translate raw lines (greedy when decode.beam == 1, else beam search) -> one detokenised
    line each, in input order. The model is put in eval mode and restored afterwards, so the
    trainer may pass its (unwrapped, not DDP) model for validation BLEU."""
    def search(src: torch.Tensor, src_mask: torch.Tensor) -> list[list[int]]:
        return search_batch(model, src, src_mask, decode)

    tokens = _map_sentences(model, tokenizer, lines, decode, device=device, progress=progress, search=search, empty=[])
    return tokenizer.decode_tgt(tokens)


def translate_nbest(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
) -> list[list[tuple[str, float]]]:
    """The `decode.n_best` best translations of each line with their length-normalised scores,
    best first (beam search, also for beam 1). An empty line gives [("", 0.0)]."""
    def search(src: torch.Tensor, src_mask: torch.Tensor) -> list[list[tuple[list[int], float]]]:
        found = search_batch(model, src, src_mask, decode, n_best=decode.n_best)
        return [[(h.tokens, h.score) for h in nbest] for nbest in found]

    found = _map_sentences(model, tokenizer, lines, decode, device=device, progress=progress, search=search,
                           empty=[([], 0.0)])
    texts = iter(tokenizer.decode_tgt([tokens for nbest in found for tokens, _ in nbest]))
    return [[(next(texts), s) for _, s in nbest] for nbest in found]
