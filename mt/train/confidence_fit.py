"""The sentence confidence's calibration fitted on validation, stored in the checkpoint (as
mt/train/decode_fit.py stores alpha): `decode.calibration.weights`, the weights `mt.decode.confidence` maps
a sentence's signals with, so that `mt translate --scores`, `mt serve` and `mt evaluate` use them.

The fit translates the val lines with the checkpoint's own decode settings (the outputs users will
get), scores each output by sentence chrF against its reference, and fits a logistic regression with
soft labels (chrF / 100) on `mt.decode.confidence.FEATURES`: Newton's method on the cross-entropy,
features standardised, a small ridge (`L2`) so that a feature that never varies on val (a model with
no UNK in its val sources) gets weight 0 instead of an arbitrary one. The loss is convex: one answer
whatever the start. The confidence then estimates the sentence chrF / 100 the output can expect.

`fit_and_store_confidence` runs after training with `train.fit_confidence` (after the alpha fit, so
the outputs are those of the fitted alpha); scripts/experiments/exp_confidence.py `--fit --store`
does the same for any existing checkpoint (one trained before the fit existed). What it measured
goes under "confidence_fit" in the checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.confidence import FEATURES, Scored, calibrated, distinct_share
from mt.decode.engine import Engine, NativeModel
from mt.decode.translate import search_lines
from mt.eval.confidence import sentence_chrf, spearman
from mt.model.checkpoint import read_checkpoint, store_confidence_fit
from mt.train.validate import Validator

# ridge on the standardised weights (per sentence: the loss is a mean); 1e-2 shrank a true 1.5 to 1.0
L2 = 1e-4
NEWTON_STEPS = 30  # Newton's method converges in ~10 on a few thousand sentences; the rest are cheap
FIT_SENTENCES = 1500  # val lines decoded at most (as mt/train/decode_fit.py)


def fit_weights(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> tuple[float, ...]:
    """(w..., b) of sigmoid(w . x + b) fitted to `targets` in [0, 1] (soft labels) by cross-entropy
    with ridge `L2` on the standardised weights. rows: N feature vectors of `FEATURES`' length."""
    x = torch.tensor([list(r) for r in rows], dtype=torch.float64)  # (N, F)
    y = torch.tensor(list(targets), dtype=torch.float64).clamp(0.0, 1.0)  # (N,)
    mean, std = x.mean(dim=0), x.std(dim=0)
    std = torch.where(std > 1e-12, std, torch.ones_like(std))  # a constant feature: weight 0 by the ridge
    z = torch.cat([(x - mean) / std, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)  # (N, F + 1)
    w = torch.zeros(z.size(1), dtype=torch.float64)
    ridge = torch.full((z.size(1),), L2, dtype=torch.float64)
    ridge[-1] = 0.0  # the bias is free
    for _ in range(NEWTON_STEPS):
        p = torch.sigmoid(z @ w)
        grad = z.T @ (p - y) / len(y) + ridge * w
        hess = ((z.T * (p * (1 - p))) @ z / len(y) + torch.diag(ridge)
                + 1e-9 * torch.eye(z.size(1), dtype=torch.float64))
        w = w - torch.linalg.solve(hess, grad)
    scale = w[:-1] / std  # back to raw features: w . (x - mean) / std + b
    return tuple(float(v) for v in scale) + (float(w[-1] - (scale * mean).sum()),)


def translated_with_chrf(model: NativeModel | Engine, tokenizer: Tokenizer, sources: Sequence[str],
                        refs: Sequence[str], decode: DecodeConfig, device: torch.device | str,
                        ) -> tuple[list[Scored], list[float]]:
    """The non-empty `sources` translated with `decode` (`Scored`) and each output's sentence chrF."""
    keep = [i for i, line in enumerate(sources) if line.strip()]
    found = search_lines(model, tokenizer, [sources[i] for i in keep], decode, device=device).scored()
    return found, sentence_chrf([s.output for s in found], [refs[i] for i in keep])


def fit_scored(found: Sequence[Scored], chrf: Sequence[float],
               seconds: float) -> tuple[tuple[float, ...], dict[str, Any]]:
    """(weights, record) fitted on translated sentences and their sentence chrF."""
    rows = [s.features() for s in found]
    weights = fit_weights(rows, [c / 100.0 for c in chrf])
    after = [calibrated(r, weights) for r in rows]
    record = {"features": list(FEATURES), "weights": list(weights), "valid_sentences": len(found),
              "valid_spearman": round(spearman(after, chrf), 4),
              "valid_spearman_mean_log_prob": round(spearman([r[0] for r in rows], chrf), 4),
              "valid_mean_chrf": round(sum(chrf) / max(1, len(chrf)), 2),
              "valid_mean_confidence": round(100 * sum(after) / max(1, len(after)), 2),
              "seconds": round(seconds, 1),
              "min_source_pieces": min((len(s.src_ids) for s in found), default=0),
              "min_distinct_share": round(min((distinct_share(s.source) for s in found), default=0.0), 4)}
    return weights, record


def fit_confidence(model: NativeModel | Engine, tokenizer: Tokenizer, sources: Sequence[str],
                   refs: Sequence[str], decode: DecodeConfig,
                   device: torch.device | str) -> tuple[tuple[float, ...], dict[str, Any]]:
    """(weights, record): the calibration fitted on `sources` translated with `decode` against `refs`,
    and what it measured (val Spearman of confidence and sentence chrF, and of the mean log-prob
    alone)."""
    started = time.perf_counter()
    found, chrf = translated_with_chrf(model, tokenizer, sources, refs, decode, device)
    return fit_scored(found, chrf, time.perf_counter() - started)


def fit_and_store_confidence(path: Path, validator: Validator, device: torch.device,
                             report: Callable[[str], None]) -> tuple[float, ...]:
    """The calibration of the model in the checkpoint at `path`, fitted on the first FIT_SENTENCES
    val lines of every pair of `validator` with the checkpoint's own decode settings (its fitted
    alpha), and stored there (decode.calibration and a "confidence_fit" record); `report` gets one
    line."""
    started = time.perf_counter()
    ckpt = read_checkpoint(path)
    decode = ckpt.config.decode
    model, decode = ckpt.model(device), dataclasses.replace(
        decode, search=dataclasses.replace(decode.search, n_best=1, sampling=False))
    found: list[Scored] = []
    chrf: list[float] = []
    for pair in validator.pairs.values():
        sources, refs = pair.lines(FIT_SENTENCES)
        more, scores = translated_with_chrf(model, pair.tokenizer, sources, refs, decode, device)
        found, chrf = found + more, chrf + scores
    weights, record = fit_scored(found, chrf, time.perf_counter() - started)
    store_confidence_fit(path, weights, record)
    report(f"confidence fitted on {record['valid_sentences']:,} val sentences ({record['seconds']:.0f}s): "
           f"Spearman with sentence chrF {record['valid_spearman']:.3f} (mean log-prob alone "
           f"{record['valid_spearman_mean_log_prob']:.3f}); stored in {path.name}")
    return weights
