"""Validation during training: val loss / NLL / perplexity and val BLEU / chrF.

Every language pair of the model (`cfg.data.pairs`; a bilingual run has one) is validated on its
own val split. Loss is teacher-forced over the whole encoded split (batches collated once and kept
on the device). BLEU and chrF come from decoding the first `train.valid_max_sentences` raw val
lines (all when 0) with `mt.decode.translate.translate_lines` and `mt.eval.evaluate.score`, the
code `mt evaluate` runs, with the pair's target tag when the model has tags and the BLEU
tokenizer of its target language, greedy unless `train.valid_beam` > 1, with the rest of the
`decode` section as configured (never sampling: validation BLEU measures the model's search output).

The record's loss, nll, bleu and chrf are the means over pairs (ppl = exp(mean nll)): a pair's
own figures when there is one, so best.pt, early stopping and averaging select on the pairs' mean;
with several pairs `record["pairs"]` holds each pair's own scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mt.config import Config, DecodeConfig, PairConfig
from mt.data.batching import Batch, TokenBatchSampler, collate
from mt.data.corpus import read_split
from mt.data.splits import EncodedSplit, load_split
from mt.data.tokenizer import Tokenizer
from mt.decode.translate import translate_lines
from mt.eval.bleu import bleu_tokenizer_for
from mt.eval.evaluate import score
from mt.train.loss import label_smoothed_nll


class _PairValidation:
    """One pair's val split: its collated batches and raw lines (cached), the tokenizer with its
    target tag and its BLEU tokenizer."""

    def __init__(self, cfg: Config, pair: PairConfig, split: EncodedSplit, tokenizer: Tokenizer,
                 device: torch.device) -> None:
        self.cfg, self.pair, self.split, self.device = cfg, pair, split, device
        self.tokenizer = tokenizer.for_target(pair.tgt_lang)
        self._batches: list[Batch] | None = None
        self._lines: tuple[list[str], list[str]] | None = None  # the whole val split, read once
        # The tokenizer `mt evaluate` would use for this target language (chosen once: one fallback note).
        self.bleu_tokenize = (bleu_tokenizer_for(pair.tgt_lang, cfg.decode.bleu_tokenize)
                              if cfg.train.valid_bleu else "")

    def batches(self) -> list[Batch]:
        if self._batches is None:
            split, t = self.split, self.cfg.train
            sampler = TokenBatchSampler(split.src.lengths(), split.tgt.lengths(), max_tokens=t.max_tokens,
                                        max_sentences=t.max_sentences, seed=0)
            self._batches = [collate([split.src[j] for j in b], [split.tgt[j] for j in b], b).to(self.device)
                             for b in sampler.epoch_batches(0)]
        return self._batches

    def lines(self, limit: int) -> tuple[list[str], list[str]]:
        """The first `limit` raw val source/reference lines (0: all of them)."""
        if self._lines is None:
            self._lines = read_split(self.pair, self.pair.valid_split)
        src, ref = self._lines
        return (src[:limit], ref[:limit]) if limit > 0 else (src, ref)

    def __call__(self, model: torch.nn.Module,
                 autocast: Callable[[], contextlib.AbstractContextManager]) -> dict[str, Any]:
        """{loss, nll, ppl} per target token, plus {bleu, chrf} when train.valid_bleu; `model` in eval
        mode."""
        t = self.cfg.train
        loss_sum = nll_sum = tokens = 0.0
        for batch in self.batches():
            with autocast():
                logits = model(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
            loss, nll, n = label_smoothed_nll(logits, batch.tgt_out, t.label_smoothing)
            loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n.item()
        record: dict[str, Any] = {"loss": loss_sum / tokens, "nll": nll_sum / tokens,
                                  "ppl": math.exp(min(nll_sum / tokens, 50.0))}
        if t.valid_bleu:
            search = dataclasses.replace(self.cfg.decode.search, beam=t.valid_beam, n_best=1, sampling=False)
            decode = dataclasses.replace(self.cfg.decode, search=search)
            src, ref = self.lines(t.valid_max_sentences)
            hyps = translate_lines(model, self.tokenizer, src, decode, device=self.device)
            scores = score(hyps, ref, tokenize=self.bleu_tokenize)
            record.update(bleu=scores.bleu, chrf=scores.chrf)
        return record


    def bleu(self, model: torch.nn.Module, decode: DecodeConfig, max_sentences: int) -> float:
        """Val BLEU of the first `max_sentences` val lines (0: all) decoded by `model` with `decode`,
        with validation's BLEU tokenizer."""
        src, ref = self.lines(max_sentences)
        hyps = translate_lines(model, self.tokenizer, src, decode, device=self.device)
        return score(hyps, ref, tokenize=self.bleu_tokenize or bleu_tokenizer_for(
            self.pair.tgt_lang, self.cfg.decode.bleu_tokenize)).bleu


class Validator:
    """Scores a model on the val split of each of its language pairs (prepared by mt.data.prepare)."""

    def __init__(self, cfg: Config, run_dir: Path, tokenizer: Tokenizer, device: torch.device,
                 autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        self.autocast = autocast
        self.pairs: dict[str, _PairValidation] = {}
        for pair in cfg.data.pairs:
            split = load_split(run_dir, cfg.data.split_label(pair, pair.valid_split))
            self.pairs[pair.name] = _PairValidation(cfg, pair, split, tokenizer, device)

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module) -> dict[str, Any]:
        """{loss, nll, ppl, [bleu, chrf]}: means over the pairs (ppl = exp(mean nll)), plus, with
        several pairs, {"pairs": {"en-de": its record, ...}}. `model` unwrapped (not DDP)."""
        was_training = model.training
        model.eval()
        try:
            per_pair = {name: validate(model, self.autocast) for name, validate in self.pairs.items()}
        finally:
            model.train(was_training)
        records = list(per_pair.values())
        record: dict[str, Any] = {key: sum(r[key] for r in records) / len(records) for key in ("loss", "nll")}
        record["ppl"] = math.exp(min(record["nll"], 50.0))
        record.update({key: sum(r[key] for r in records) / len(records)
                       for key in ("bleu", "chrf") if key in records[0]})
        if len(records) > 1:  # one pair's own record is the record itself
            record["pairs"] = per_pair
        return record


    @torch.no_grad()
    def bleu(self, model: torch.nn.Module, decode: DecodeConfig, max_sentences: int) -> float:
        """Mean val BLEU over the pairs of `model` (eval mode, unwrapped) decoded with `decode`, on
        the first `max_sentences` val lines of each (0: all)."""
        model.eval()
        return sum(pair.bleu(model, decode, max_sentences) for pair in self.pairs.values()) / len(self.pairs)

    def sentences(self, max_sentences: int) -> int:
        """How many val lines `bleu(..., max_sentences)` decodes, over all pairs."""
        return sum(len(pair.lines(max_sentences)[0]) for pair in self.pairs.values())


def metric_name(valid_bleu: bool) -> str:
    """What selection_metric is, in words."""
    return "val BLEU" if valid_bleu else "val NLL"


def selection_metric(record: dict[str, Any]) -> float:
    """What best.pt / early stopping / averaging maximise: val BLEU, or -NLL without BLEU (means
    over the pairs of a model of several)."""
    return record["bleu"] if "bleu" in record else -record["nll"]
