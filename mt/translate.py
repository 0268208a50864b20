"""Translating raw text with a trained model: the library behind `mt translate`, `mt evaluate`,
validation BLEU and the attention plot.

Encode with the source sentencepiece model, batch sentences of similar length
(`mt.batching.decode_batches`), run the search the `DecodeConfig` asks for (`search_batch`:
sampling when decode.sampling, else greedy for beam 1 and beam search above), put the results
back in input order and detokenise with the target model. The model may be one Transformer or
an `mt.ensemble.Ensemble` of several checkpoints. An empty input line gives an empty output line without running the model, so
outputs always line up with inputs. Nothing here prints except a progress bar on request; a
source line too long for the model is cut and reported as an `MTWarning`.

The model behind it is an `Engine`: mt's own Transformer or Ensemble (`NativeEngine`: greedy,
beam search or sampling through `search_batch`) or a model exported to CTranslate2
(`mt.ct2.CT2Translator`, `mt export`). Both take and return token ids; `load_engine` picks one
from what `-c` names (.pt files or one exported directory), and `translate_lines` /
`translate_nbest` accept either (or a bare Transformer/Ensemble, wrapped in a NativeEngine).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar, overload

import numpy as np
import torch
from tqdm import tqdm

from mt.batching import collate_source, decode_batches
from mt.config import Config, DecodeConfig, config_from_dict
from mt.distributed import resolve_device
from mt.ensemble import Ensemble, load_models, max_positions
from mt.errors import MTError, MTWarning
from mt.export import is_export_dir
from mt.model import Transformer
from mt.sampling import sample_search
from mt.search import Hypothesis, beam_search, greedy_search
from mt.tokenizer import Tokenizer

T = TypeVar("T")


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None, sampling: bool | None = None, temperature: float | None = None,
                    top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                    precision: str | None = None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.

    Searching, an --n-best above the configured beam raises the beam to it unless --beam was
    given too; without --n-best the config's decode.n_best counts (at most --beam when that is
    given). Sampling (--sampling, or decode.sampling in the config), --n-best is the number of
    samples per sentence and --beam does not apply; --temperature, --top-k, --top-p and --seed
    apply only to sampling. --precision bf16 decodes a bf16 copy of the model (see NativeEngine)."""
    for flag, value in (("--beam", beam), ("--n-best", n_best), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise MTError(f"{flag}: must be at least 1, got {value}")
    if temperature is not None and not temperature > 0.0:
        raise MTError(f"--temperature: must be positive, got {temperature}")
    if top_k is not None and top_k < 0:
        raise MTError(f"--top-k: must be 0 (no limit) or positive, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise MTError(f"--top-p: must be in (0, 1], got {top_p}")
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        raise MTError(f"--alpha: must be a finite number >= 0, got {alpha}")
    if precision is not None and precision not in ("fp32", "bf16"):
        raise MTError(f"--precision: expected fp32 or bf16, got {precision!r}")

    def keep(value: T | None, default: T) -> T:
        return default if value is None else value

    decode = dataclasses.replace(
        base,
        beam=keep(beam, base.beam),
        alpha=keep(alpha, base.alpha),
        n_best=keep(n_best, base.n_best if beam is None else min(base.n_best, beam)),
        max_tokens=keep(max_tokens, base.max_tokens),
        sampling=keep(sampling, base.sampling),
        temperature=keep(temperature, base.temperature),
        top_k=keep(top_k, base.top_k),
        top_p=keep(top_p, base.top_p),
        seed=keep(seed, base.seed),
        precision=keep(precision, base.precision),
    )
    if decode.sampling:
        if beam is not None:
            raise MTError("--beam: sampling draws translations, it does not search; drop --beam or --sampling")
        return decode
    given = [flag for flag, value in (("--temperature", temperature), ("--top-k", top_k), ("--top-p", top_p),
                                      ("--seed", seed)) if value is not None]
    if given:
        raise MTError(f"{given[0]}: only applies to sampling; add --sampling")
    if decode.n_best > decode.beam:
        if beam is not None:
            raise MTError(f"--n-best {decode.n_best} exceeds --beam {decode.beam}")
        decode = dataclasses.replace(decode, beam=decode.n_best)
    return decode


def load_model(checkpoints: Sequence[Path], device: str) -> tuple[Transformer | Ensemble, Tokenizer, Config,
                                                                   torch.device]:
    """(model in eval mode, tokenizer, config, device) from one checkpoint, or an `Ensemble` of
    several (their tokenizers must be the same; config and decode settings are the first's)."""
    dev = resolve_device(device, local_rank=0)
    model, tokenizer, cfg = load_models(checkpoints, dev)
    return model, tokenizer, cfg, dev


def rows_per_sentence(decode: DecodeConfig) -> int:
    """Decoder rows one sentence takes: its samples when sampling, else the beam."""
    return decode.n_best if decode.sampling else decode.beam


Model = Transformer | Ensemble


@overload
def search_batch(model: Model, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: None = None, sentence_ids: list[int] | None = None) -> list[list[int]]: ...
@overload
def search_batch(model: Model, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: int, sentence_ids: list[int] | None = None) -> list[list[Hypothesis]]: ...
def search_batch(model: Model, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: int | None = None,
                 sentence_ids: list[int] | None = None) -> list[list[int]] | list[list[Hypothesis]]:
    """The search `decode` asks for over one batch. src, src_mask: (B, S) on the model's device.

    Without `n_best`: the best output's tokens per sentence (no BOS/EOS), by greedy search when
    decode.beam == 1, else by beam search. With `n_best`: each sentence's `n_best` hypotheses
    with their scores, best first, by beam search (also for beam 1). With `decode.sampling`,
    one sample per sentence, or with `n_best` that many, highest score first; `sentence_ids`
    (B ints, default 0..B-1) key each sentence's random draws (see mt.sampling). Outputs stay
    below the model's max_positions. The caller chooses train/eval mode and gradient tracking.
    """
    limit = max_positions(model) - 1
    if decode.sampling:
        samples = sample_search(model, src, src_mask, n_samples=1 if n_best is None else n_best,
                                temperature=decode.temperature, top_k=decode.top_k, top_p=decode.top_p,
                                seed=decode.seed, alpha=decode.alpha, length_penalty=decode.length_penalty,
                                max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                                forbid_unk=decode.forbid_unk, sentence_ids=sentence_ids, max_len_limit=limit)
        return [hyps[0].tokens for hyps in samples] if n_best is None else samples
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

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int]) -> list[list[tuple[list[int], float]]]:
        """For each source (ids without EOS): with `n_best` None, the one output `decode` asks for
        (its score may be NaN); else its `n_best` hypotheses (or samples) with their
        length-normalised scores, best first. `sentence_ids` key sampling's random draws."""
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
    """mt's own Transformer or Ensemble as an `Engine`: `search_batch` in eval mode, no autograd.

    decode.precision bf16 runs a bf16 copy of the model (weights cast once; log-probs and search
    stay float32), opt-in and only where bf16 is native: check its BLEU against fp32 first.
    """

    def __init__(self, model: Model, device: torch.device | str) -> None:
        self.model, self.device = model, device
        self.max_positions = max_positions(model)
        self._bf16: Model | None = None

    def _model_for(self, decode: DecodeConfig) -> Model:
        if decode.precision == "fp32":
            return self.model
        if not native_bf16(self.device):
            raise MTError(f"--precision bf16: {self.device} has no native bf16 (needs AVX512-BF16/AMX or a bf16 GPU); "
                          "use fp32")
        if self._bf16 is None:
            self._bf16 = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return self._bf16

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int]) -> list[list[tuple[list[int], float]]]:
        model = self._model_for(decode)
        src, src_mask = collate_source(src_ids)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                found = search_batch(model, src.to(self.device), src_mask.to(self.device), decode, n_best=n_best,
                                     sentence_ids=sentence_ids)
        finally:
            model.train(was_training)
        if n_best is None:
            return [[(tokens, float("nan"))] for tokens in found]
        return [[(h.tokens, h.score) for h in hyps] for hyps in found]


def as_engine(model: Model | Engine, device: torch.device | str) -> Engine:
    """A Transformer or Ensemble wrapped in a `NativeEngine`; an engine as it is."""
    return NativeEngine(model, device) if isinstance(model, (Transformer, Ensemble)) else model


def load_engine(checkpoints: Sequence[Path], device: str) -> tuple[Engine, Tokenizer, Config, torch.device]:
    """(engine, tokenizer, config, device) for `-c PATH...`: checkpoint files run natively on
    `device` (several: an ensemble); one directory written by `mt export` runs in CTranslate2 on
    the CPU, with the config (decode defaults included) stored in its mt_export.json."""
    exports = [path for path in checkpoints if is_export_dir(path)]
    if not exports:
        model, tokenizer, cfg, dev = load_model(checkpoints, device)
        return NativeEngine(model, dev), tokenizer, cfg, dev
    path = exports[0]
    if len(checkpoints) > 1:
        raise MTError(f"-c {path}: an exported CTranslate2 model cannot be part of an ensemble; give it alone")
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
    search: Callable[[list[list[int]], list[int]], list[T]],
    empty: T,
) -> list[T]:
    """Run `search(B source id lists, their line indices) -> B results` over length-sorted batches
    of the encoded lines; results come back in input order, `empty` for lines without any token."""
    # Stripped as prepare strips the corpus: a whitespace-only line is empty, not a run of spaces.
    ids = tokenizer.encode_src([line.strip() for line in lines])
    limit = engine.max_positions - 1  # the source gets an EOS; longer input cannot be encoded
    too_long = sum(len(seq) > limit for seq in ids)
    if too_long:
        warnings.warn(f"{too_long} of {len(ids)} source lines longer than {limit} pieces are truncated "
                      f"(model.max_positions={limit + 1}, EOS included)", MTWarning, stacklevel=3)
        ids = [seq[:limit] for seq in ids]
    todo = np.array([i for i, seq in enumerate(ids) if seq], dtype=np.int64)
    results: list[T] = [empty] * len(ids)
    lengths = np.array([len(ids[i]) for i in todo], dtype=np.int64)
    # decode.max_tokens bounds source tokens times the beam (or samples): search runs B * beam rows.
    budget = max(1, decode.max_tokens // rows_per_sentence(decode))
    with tqdm(total=len(ids), disable=not progress, file=sys.stderr, unit="sent", desc="translate") as bar:
        bar.update(len(ids) - len(todo))
        for batch in decode_batches(lengths, max_tokens=budget, max_sentences=budget):
            rows = todo[batch].tolist()
            for row, result in zip(rows, search([ids[i] for i in rows], rows)):
                results[row] = result
            bar.update(len(rows))
    return results


def translate_lines(
    model: Model | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
    first_id: int = 0,
) -> list[str]:
    """Translate raw lines (sampling when decode.sampling, else greedy when decode.beam == 1,
    else beam search) -> one detokenised line each, in input order. The model is put in eval
    mode and restored afterwards, so the trainer may pass its (unwrapped, not DDP) model for
    validation BLEU. Sampling keys line i's draws by `first_id + i`: the same lines and seed
    give the same output however they are batched (or fed one by one with matching first_id)."""
    engine = as_engine(model, device)

    def search(src_ids: list[list[int]], rows: list[int]) -> list[list[int]]:
        found = engine.search_ids(src_ids, decode, n_best=None, sentence_ids=[first_id + r for r in rows])
        return [hyps[0][0] for hyps in found]

    tokens = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[])
    return tokenizer.decode_tgt(tokens)


def translate_nbest(
    model: Model | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
    first_id: int = 0,
) -> list[list[tuple[str, float]]]:
    """The `decode.n_best` best translations of each line with their length-normalised scores,
    best first (beam search, also for beam 1), or `decode.n_best` samples when decode.sampling
    (highest score first; keyed as in `translate_lines`). An empty line gives [("", 0.0)]."""
    engine = as_engine(model, device)

    def search(src_ids: list[list[int]], rows: list[int]) -> list[list[tuple[list[int], float]]]:
        return engine.search_ids(src_ids, decode, n_best=decode.n_best, sentence_ids=[first_id + r for r in rows])

    found = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[([], 0.0)])
    texts = iter(tokenizer.decode_tgt([tokens for nbest in found for tokens, _ in nbest]))
    return [[(next(texts), s) for _, s in nbest] for nbest in found]
