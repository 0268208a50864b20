"""Translating raw text with a trained model: the library behind `mt translate`, `mt evaluate`,
validation BLEU and the attention plot.

Encode with the source sentencepiece model, batch sentences of similar length
(`mt.batching.decode_batches`), run the search the `DecodeConfig` asks for (`search_batch`:
greedy for beam 1, else beam search), put the results back in input order and detokenise with
the target model. An empty input line gives an empty output line without running the model, so
outputs always line up with inputs. Nothing here prints except a progress bar on request; a
source line too long for the model is cut and reported as an `MTWarning`.

The model behind it is an `Engine`: mt's own Transformer (`NativeEngine`: greedy or beam search
through `search_batch`) or a model exported to CTranslate2 (`mt.ct2.CT2Translator`, `mt export`).
Both take and return token ids; `load_engine` picks one from what `-c` names (a .pt file or an
exported directory), and `translate_lines`/`translate_nbest` accept either (or a bare Transformer).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar, overload

import numpy as np
import torch
from tqdm import tqdm

from mt.batching import collate_source, decode_batches
from mt.checkpoint import load_for_inference
from mt.config import Config, DecodeConfig, config_from_dict
from mt.distributed import resolve_device
from mt.errors import MTError, MTWarning
from mt.export import is_export_dir
from mt.model import Transformer
from mt.search import Hypothesis, beam_search, greedy_search
from mt.tokenizer import Tokenizer

T = TypeVar("T")


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None, precision: str | None = None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.
    An --n-best above the configured beam raises the beam to it unless --beam was given too."""
    for flag, value in (("--beam", beam), ("--n-best", n_best), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise MTError(f"{flag}: must be at least 1, got {value}")
    decode = dataclasses.replace(
        base,
        beam=base.beam if beam is None else beam,
        alpha=base.alpha if alpha is None else alpha,
        n_best=1 if n_best is None else n_best,
        max_tokens=base.max_tokens if max_tokens is None else max_tokens,
        precision=base.precision if precision is None else precision,
    )
    if decode.precision not in ("fp32", "bf16"):
        raise MTError(f"--precision: expected fp32 or bf16, got {decode.precision!r}")
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


class Engine(Protocol):
    """What translation needs from a model: its position limit and a search over token ids."""

    max_positions: int

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *,
                   n_best: int | None) -> list[list[tuple[list[int], float]]]:
        """For each source (ids without EOS): with `n_best` None, the one output of the search
        `decode` asks for (greedy for beam 1, its score may be NaN); else its `n_best` beam-search
        hypotheses with their length-normalised scores, best first."""
        ...


def native_bf16(device: torch.device | str) -> bool:
    """Whether `device` computes bf16 natively (CUDA with bf16, or a CPU with AVX512-BF16 or AMX);
    elsewhere bf16 matmuls are emulated and far slower than fp32."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_bf16_supported()
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


class NativeEngine:
    """mt's own Transformer as an `Engine`: `search_batch` in eval mode without autograd.

    decode.precision bf16 runs a bf16 copy of the model (weights cast once; log-probs and search
    stay float32), opt-in and only where bf16 is native: check its BLEU against fp32 first.
    """

    def __init__(self, model: Transformer, device: torch.device | str) -> None:
        self.model, self.device = model, device
        self.max_positions = model.cfg.max_positions
        self._bf16: Transformer | None = None

    def _model_for(self, decode: DecodeConfig) -> Transformer:
        if decode.precision == "fp32":
            return self.model
        if not native_bf16(self.device):
            raise MTError(f"--precision bf16: {self.device} has no native bf16 (needs AVX512-BF16/AMX or a bf16 GPU); "
                          "use fp32")
        if self._bf16 is None:
            self._bf16 = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return self._bf16

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *,
                   n_best: int | None) -> list[list[tuple[list[int], float]]]:
        model = self._model_for(decode)
        src, src_mask = collate_source(src_ids)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                found = search_batch(model, src.to(self.device), src_mask.to(self.device), decode, n_best=n_best)
        finally:
            model.train(was_training)
        if n_best is None:
            return [[(tokens, float("nan"))] for tokens in found]
        return [[(h.tokens, h.score) for h in hyps] for hyps in found]


def as_engine(model: Transformer | Engine, device: torch.device | str) -> Engine:
    """A Transformer wrapped in a `NativeEngine`; an engine as it is."""
    return NativeEngine(model, device) if isinstance(model, Transformer) else model


def load_engine(path: Path, device: str) -> tuple[Engine, Tokenizer, Config, torch.device]:
    """(engine, tokenizer, config, device) for `-c PATH`: a checkpoint file runs natively on
    `device`; a directory written by `mt export` runs in CTranslate2 on the CPU, with the config
    (decode defaults included) stored in its mt_export.json."""
    if not is_export_dir(path):
        model, tokenizer, cfg, dev = load_model(path, device)
        return NativeEngine(model, dev), tokenizer, cfg, dev
    if device not in ("auto", "cpu"):
        raise MTError(f"--device {device}: an exported CTranslate2 model ('{path}') runs on the CPU here; "
                      "use --device cpu or the .pt checkpoint")
    from mt.ct2 import CT2Translator

    translator = CT2Translator(path, max_batch_size=0)  # one CTranslate2 batch per mt batch (decode.max_tokens)
    try:
        cfg = config_from_dict(translator.info["config"])
    except MTError as e:
        raise MTError(f"'{path}': stored config is invalid: {e}") from None
    return translator, Tokenizer.from_files(path), cfg, torch.device("cpu")


def _map_sentences(
    engine: Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    progress: bool,
    search: Callable[[list[list[int]]], list[T]],
    empty: T,
) -> list[T]:
    """Run `search(B source id lists) -> B results` over length-sorted batches of the encoded
    lines; results come back in input order, `empty` for lines without any token."""
    ids = tokenizer.encode_src(list(lines))
    limit = engine.max_positions - 1  # the source gets an EOS; longer input cannot be encoded
    if any(len(seq) > limit for seq in ids):
        warnings.warn(f"source lines longer than {limit} pieces are truncated", MTWarning, stacklevel=3)
        ids = [seq[:limit] for seq in ids]
    todo = np.array([i for i, seq in enumerate(ids) if seq], dtype=np.int64)
    results: list[T] = [empty] * len(ids)
    lengths = np.array([len(ids[i]) for i in todo], dtype=np.int64)
    # decode.max_tokens bounds source tokens times the beam: beam search runs B * beam rows.
    budget = max(1, decode.max_tokens // decode.beam)
    with tqdm(total=len(ids), disable=not progress, file=sys.stderr, unit="sent", desc="translate") as bar:
        bar.update(len(ids) - len(todo))
        for batch in decode_batches(lengths, max_tokens=budget, max_sentences=budget):
            rows = todo[batch]
            for row, result in zip(rows.tolist(), search([ids[i] for i in rows])):
                results[row] = result
            bar.update(len(rows))
    return results


def translate_lines(
    model: Transformer | Engine,
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
    engine = as_engine(model, device)

    def search(src_ids: list[list[int]]) -> list[list[int]]:
        return [hyps[0][0] for hyps in engine.search_ids(src_ids, decode, n_best=None)]

    tokens = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[])
    return tokenizer.decode_tgt(tokens)


def translate_nbest(
    model: Transformer | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
) -> list[list[tuple[str, float]]]:
    """The `decode.n_best` best translations of each line with their length-normalised scores,
    best first (beam search, also for beam 1). An empty line gives [("", 0.0)]."""
    engine = as_engine(model, device)

    def search(src_ids: list[list[int]]) -> list[list[tuple[list[int], float]]]:
        return engine.search_ids(src_ids, decode, n_best=decode.n_best)

    found = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search,
                           empty=[([], 0.0)])
    texts = iter(tokenizer.decode_tgt([tokens for nbest in found for tokens, _ in nbest]))
    return [[(next(texts), s) for _, s in nbest] for nbest in found]
