"""Validation during training: val loss / NLL / perplexity and val BLEU / chrF.

Loss is teacher-forced over the whole encoded val split (batches collated once and kept on the
device). BLEU and chrF come from decoding the first `train.valid_max_sentences` raw val lines
(all when 0) with `mt.decode.translate.translate_lines` and `mt.eval.evaluate.score`, the code `mt evaluate`
runs, greedy unless `train.valid_beam` > 1, with the rest of the `decode` section as configured
(never sampling: validation BLEU measures the model's search output).

A multi-pair run (data.pairs) validates each pair on its own val split, with its target tag and
the BLEU tokenizer of its target language (`PairsValidator`); the record's loss, nll, bleu and
chrf are the means over pairs (ppl = exp(mean nll)), so best.pt, early stopping and averaging
select on the pairs' mean, and `record["pairs"]` holds each pair's own scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mt.config import Config
from mt.data.batching import Batch, TokenBatchSampler, collate
from mt.data.corpus import read_split
from mt.data.pairs import pair_data, pair_name, prepared_split
from mt.data.splits import EncodedSplit, load_split
from mt.data.tokenizer import Tokenizer
from mt.decode.translate import translate_lines
from mt.eval.bleu import bleu_tokenizer_for
from mt.eval.evaluate import score
from mt.train.loss import label_smoothed_nll


class Validator:
    """Scores a model on the val split; caches the collated batches and the raw lines."""

    def __init__(self, cfg: Config, valid_split: EncodedSplit, tokenizer: Tokenizer, device: torch.device,
                 autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        self.cfg, self.split, self.tokenizer, self.device, self.autocast = cfg, valid_split, tokenizer, device, autocast
        self._batches: list[Batch] | None = None
        self._lines: tuple[list[str], list[str]] | None = None
        # The tokenizer `mt evaluate` would use for this target language (chosen once: one fallback note).
        self.bleu_tokenize = bleu_tokenizer_for(cfg.data.tgt_lang, cfg.decode.bleu_tokenize) if cfg.train.valid_bleu else ""

    def batches(self) -> list[Batch]:
        if self._batches is None:
            split, t = self.split, self.cfg.train
            sampler = TokenBatchSampler(split.src.lengths(), split.tgt.lengths(), max_tokens=t.max_tokens,
                                        max_sentences=t.max_sentences, seed=0)
            self._batches = [collate([split.src[j] for j in b], [split.tgt[j] for j in b], b).to(self.device)
                             for b in sampler.epoch_batches(0)]
        return self._batches

    def lines(self) -> tuple[list[str], list[str]]:
        """The raw val source/reference lines decoded for BLEU."""
        if self._lines is None:
            src, ref = read_split(self.cfg.data, self.cfg.data.valid_split)
            limit = self.cfg.train.valid_max_sentences
            self._lines = (src[:limit], ref[:limit]) if limit > 0 else (src, ref)
        return self._lines

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module) -> dict[str, Any]:
        """{loss, nll, ppl} per target token, plus {bleu, chrf} when train.valid_bleu. `model` unwrapped."""
        t = self.cfg.train
        was_training = model.training
        model.eval()
        loss_sum = nll_sum = tokens = 0.0
        try:
            for batch in self.batches():
                with self.autocast():
                    logits = model(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
                loss, nll, n = label_smoothed_nll(logits, batch.tgt_out, t.label_smoothing)
                loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n.item()
            record: dict[str, Any] = {"loss": loss_sum / tokens, "nll": nll_sum / tokens,
                                      "ppl": math.exp(min(nll_sum / tokens, 50.0))}
            if t.valid_bleu:
                decode = dataclasses.replace(self.cfg.decode, beam=t.valid_beam, n_best=1, sampling=False)
                src, ref = self.lines()
                hyps = translate_lines(model, self.tokenizer, src, decode, device=self.device)
                scores = score(hyps, ref, tokenize=self.bleu_tokenize)
                record.update(bleu=scores.bleu, chrf=scores.chrf)
        finally:
            model.train(was_training)
        return record


class PairsValidator:
    """Validates a multi-pair model on every pair's val split; the record's scores are their means."""

    def __init__(self, cfg: Config, run_dir: Path, tokenizer: Tokenizer, device: torch.device,
                 autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        self.validators: dict[str, Validator] = {}
        for pair in cfg.data.pairs:
            pair_cfg = dataclasses.replace(cfg, data=pair_data(cfg.data, pair))
            split = load_split(run_dir, prepared_split(pair, pair.valid_split))
            self.validators[pair_name(pair)] = Validator(pair_cfg, split, tokenizer.for_target(pair.tgt_lang),
                                                         device, autocast)

    def __call__(self, model: torch.nn.Module) -> dict[str, Any]:
        """{loss, nll, ppl, [bleu, chrf]} means over pairs, plus {"pairs": {"en-de": its record, ...}}."""
        per_pair = {name: validator(model) for name, validator in self.validators.items()}
        records = list(per_pair.values())
        record: dict[str, Any] = {key: sum(r[key] for r in records) / len(records)
                                  for key in ("loss", "nll", "bleu", "chrf") if key in records[0]}
        record["ppl"] = math.exp(min(record["nll"], 50.0))
        record["pairs"] = per_pair
        return record


def make_validator(cfg: Config, run_dir: Path, tokenizer: Tokenizer, device: torch.device,
                   autocast: Callable[[], contextlib.AbstractContextManager]) -> Validator | PairsValidator:
    """The validator of a run: one per pair with data.pairs, else on data.valid_split."""
    if cfg.data.pairs:
        return PairsValidator(cfg, run_dir, tokenizer, device, autocast)
    return Validator(cfg, load_split(run_dir, cfg.data.valid_split), tokenizer, device, autocast)


def selection_metric(record: dict[str, Any]) -> float:
    """What best.pt / early stopping / averaging maximise: val BLEU, or -NLL without BLEU (means
    over the pairs of a multi-pair run)."""
    return record["bleu"] if "bleu" in record else -record["nll"]
