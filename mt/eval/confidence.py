"""How well sentence confidences (`mt.decode.confidence`) rank translations: Spearman's rank
correlation with sentence chrF (what `mt evaluate` reports beside BLEU), and the ROC AUC that
separates real outputs from garbage (scripts/experiments/exp_confidence.py).

Sentence chrF is sacreBLEU's chrF (character 6-grams, beta 2) of one hypothesis against its
reference: on single sentences it is far steadier than sentence BLEU, which is 0 whenever no
4-gram matches. Both statistics are computed on ranks (ties get their mean rank), so any monotone
map of the confidence gives the same figures: they measure the ranking, not the calibration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import CHRF


def sentence_chrf(hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
    """chrF (0-100) of each hypothesis against its reference."""
    chrf = CHRF()
    return [float(chrf.sentence_score(h, [r]).score) for h, r in zip(hyps, refs)]


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of `values`, ties given their mean rank: (N,) float64."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    out = np.empty(len(x), dtype=np.float64)
    start = 0
    while start < len(x):  # one pass over runs of equal values
        end = start + 1
        while end < len(x) and sorted_x[end] == sorted_x[start]:
            end += 1
        out[order[start:end]] = (start + 1 + end) / 2.0
        start = end
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (NaN pairs left out; NaN when fewer
    than two pairs are left or a side is constant)."""
    pairs = [(x, y) for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 2:
        return math.nan
    ra, rb = ranks([x for x, _ in pairs]), ranks([y for _, y in pairs])
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom else math.nan


def roc_auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The probability that a random positive scores above a random negative (ties count half):
    the Mann-Whitney form of the ROC AUC. 1.0: every positive above every negative."""
    if not positives or not negatives:
        return math.nan
    r = ranks(list(positives) + list(negatives))
    n_pos, n_neg = len(positives), len(negatives)
    return float((r[:n_pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
