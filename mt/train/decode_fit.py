"""Decoding fitted on validation after training: the length penalty's alpha that gives the best
beam BLEU on the val split, stored in the final checkpoint's config so that `mt translate`,
`mt evaluate` and `mt serve` use it without a flag.

Why: a model trained for minutes is short-spoken. On a 20-minute Zen 3 demo model, beam 5 with
alpha 0.6 gave outputs 6.6% shorter than the references (brevity penalty 0.934); alpha 1.4,
chosen on val, raised val BLEU 34.76 -> 35.33 and test_2016_flickr 34.80 -> 35.43 (issue 54).
Marian's and fairseq's users tune the length penalty on a dev set the same way (`--normalize`,
`--lenpen`); mt does it as a step of the run.

The search (`fit_alpha`) walks a coarse grid from the configured alpha in steps of `STEP` while
BLEU improves, then tries the half steps beside the best: 4-6 beam decodes of the val lines
instead of a whole grid's. A candidate must beat the configured alpha by `MIN_GAIN` BLEU to be
chosen (val BLEU of a few hundred sentences moves by tenths between neighbours by chance).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import torch

from mt.config import DecodeConfig
from mt.model.checkpoint import read_checkpoint, store_decode_fit
from mt.train.validate import Validator

STEP = 0.4  # the coarse step of alpha
LOWEST, HIGHEST = 0.0, 2.4  # the range searched
MIN_GAIN = 0.1  # BLEU over the configured alpha a change must win


def fit_alpha(bleu_at: Callable[[float], float], start: float) -> tuple[float, dict[float, float]]:
    """The alpha to decode with, and val BLEU at every alpha tried ({alpha: BLEU}).

    bleu_at(alpha): val BLEU of beam search with that alpha; start: the configured alpha."""
    tried: dict[float, float] = {}

    def bleu(alpha: float) -> float:
        alpha = round(min(max(alpha, LOWEST), HIGHEST), 2)
        if alpha not in tried:
            tried[alpha] = bleu_at(alpha)
        return tried[alpha]

    best = round(start, 2)
    bleu(best)
    for direction in (1.0, -1.0):  # walk up (models are short-spoken more often), then down
        alpha = best
        while LOWEST <= alpha + direction * STEP <= HIGHEST and bleu(alpha + direction * STEP) > bleu(alpha):
            alpha = round(alpha + direction * STEP, 2)
        if bleu(alpha) > bleu(best):
            best = alpha
            break
    for alpha in (best - STEP / 2, best + STEP / 2):  # the half steps beside it
        if LOWEST <= alpha <= HIGHEST:
            bleu(alpha)
    best = max(tried, key=lambda a: (tried[a], -abs(a - start)))
    if tried[best] < tried[round(start, 2)] + MIN_GAIN:
        best = round(start, 2)
    return best, tried


def fit_and_store(path: Path, validator: Validator, decode: DecodeConfig, device: torch.device,
                  report: Callable[[str], None]) -> None:
    """Fit alpha for the model in the checkpoint at `path` on `validator`'s val lines, beam
    `decode.beam`, and store it there; `report` gets the one line that says what was chosen."""
    if decode.beam <= 1 or decode.length_penalty == "none":
        report(f"train.fit_alpha: nothing to fit (beam {decode.beam}, length penalty {decode.length_penalty})")
        return
    started = time.perf_counter()
    model = read_checkpoint(path).model(device)
    best, tried = fit_alpha(lambda alpha: validator.bleu(model, dataclasses.replace(
        decode, alpha=alpha, n_best=1, sampling=False)), decode.alpha)
    seconds = time.perf_counter() - started
    table = ", ".join(f"{alpha:g}: {bleu:.2f}" for alpha, bleu in sorted(tried.items()))
    store_decode_fit(path, best, {"alpha": best, "was": decode.alpha, "beam": decode.beam,
                                  "valid_bleu": {str(a): b for a, b in sorted(tried.items())},
                                  "seconds": round(seconds, 1)})
    change = f"alpha {decode.alpha:g} -> {best:g}" if best != round(decode.alpha, 2) else f"alpha {best:g} kept"
    report(f"decoding fitted on val (beam {decode.beam}, {seconds:.0f}s): {change}, val BLEU "
           f"{tried[round(decode.alpha, 2)]:.2f} -> {tried[best]:.2f} ({table}); stored in {path.name}")
