"""A confidence for every translated sentence: how good the model thinks its output is, in [0, 1].

Bergamot shows one in Firefox and LibreTranslate's users ask for one (#670): a client that knows a
line is likely garbage can flag it instead of showing it. It comes from signals the search already
has, each cheap (`FEATURES`, one row per sentence):

    mean_log_prob   the output's log-prob per scored decision (EOS included): log_prob / (|y| + 1)
    repetition      log(1 + `mt.decode.repeats.repetition_excess(source, output)`): a loop the
                    source does not have (an output that repeats a word or a character run)
    length_ratio    r = log((characters out + 1) / (characters in + 1)), clipped to [-1, 1], and r^2
    length_ratio_sq (not clipped): outputs far longer or shorter than the source (a truncation, a
                    hallucination) either way; the clip keeps a fit on val's ratios from rewarding
                    an output ten times as long as a one-word source
    unknown_share   the share of source pieces the vocabulary does not know (UNK): input unlike
                    anything the model read
    copy_share      the share of output words copied from the source as they are (untranslated)
    log_length      log(|y| + 1): short outputs' log-probs say less than long ones'

mapped by a logistic function `sigmoid(w . features + b)` (at most `FLAGGED` for an output the
repetition check flags, at most `UNCALIBRATED` for a source unlike any the fit saw: shorter, more
repetitive, or drawn out, `outside_calibration`) whose
weights are fitted on the
validation set against sentence chrF / 100 (`mt.train.confidence_fit`, a soft-label logistic
regression): the confidence is the sentence chrF the model can expect, and its ranking of
sentences is measured by `mt evaluate` (Spearman with sentence chrF). The weights are
`decode.calibration.weights` in the checkpoint's config ((w..., b), in `FEATURES` order). A checkpoint
without them (every checkpoint before the fit existed) uses `DEFAULT`: the weights fitted on the
`make demo` model (docs/guides/confidence.md has the figures), a mapping that ranks and flags
loops on any mt model but is calibrated only for one like it.

`scored` makes a sentence's `Scored` from the output's token count and score as the engine returns
them (`Results`: score = log_prob / length_penalty(|y| + 1), so the log-prob is recovered exactly);
a NaN score (an engine that has none) gives a NaN confidence, which clients see as null.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mt.config import DecodeConfig
from mt.data.tokenizer import UNK_ID
from mt.decode.repeats import CHAR_RUN_FREE, repetition_excess
from mt.decode.search import length_penalty

FEATURES = ("mean_log_prob", "repetition", "length_ratio", "length_ratio_sq", "unknown_share", "copy_share",
            "log_length")
# (w..., b) fitted on the `make demo` model's val split (mt.train.confidence_fit: best.pt of a
# 10-minute run, beam 5, alpha 0.6, no_repeat_ngram_size 3; val Spearman 0.749): the mapping of
# checkpoints without their own.
DEFAULT: tuple[float, ...] = (1.3166, 0.0092, 0.8480, -0.3861, 0.0000, -0.2451, 0.0158, 1.0987)
# Below this a sentence is shown as doubtful (the page marks it; `mt translate --scores` prints the
# number and leaves the judgement to the reader). On the demo model: odd one-word inputs 0.07-0.29,
# ordinary sentences 0.6-0.7 (docs/guides/confidence.md).
LOW = 0.3
# An output the repetition check flags (`repetition_excess` > 0) gets at most this, whatever its
# log-prob: val holds too few loops for the fit to weigh the flag, and a loop is never a good line.
FLAGGED = 0.15
# A source outside what the calibration was fitted on gets at most this, under LOW: shorter (in
# pieces) than its shortest sentence, or with a smaller share of distinct words than its most
# repetitive one. The fit has seen nothing like it, and a word alone or a word said over and over
# is where a model guesses ("Menu" -> "Männer" 0.44, "no no no no no" -> "freie nackte nackte
# nackte Oberkörper Oberkörper" 0.52 before this bound, on the demo model). The two bounds are
# stored with the fitted weights (`decode.calibration.min_pieces`, `decode.calibration.min_distinct`);
# DEFAULT's: its fit's val set (Multi30k val, by the demo's tokenizer: 5 pieces, 0.643). A source
# that runs one letter more than CHAR_RUN_FREE times ("Hmmmmmm", "Nooooo") is outside too: no word
# is written so (German's longest run is three, "Schifffahrt"), so no corpus the fit saw has one
# ("Hmmmmmm" -> "Menschen beim Hirmen" 0.300 before this bound, on the demo model).
UNCALIBRATED = 0.25
DEFAULT_MIN_PIECES = 5
DEFAULT_MIN_DISTINCT = 0.643
_WORD = re.compile(r"\w+", re.UNICODE)
# a letter CHAR_RUN_FREE + 1 times in a row
_DRAWN_OUT = re.compile(rf"([^\W\d_])\1{{{CHAR_RUN_FREE},}}", re.UNICODE)


@dataclass(frozen=True)
class Scored:
    """One translated sentence with what its confidence is made from."""

    source: str
    output: str
    src_ids: list[int]  # the source's pieces as the model read them (UNK counted)
    out_tokens: int  # the output's pieces, EOS not counted
    log_prob: float  # the output's log-prob, EOS included (NaN: the engine has none)

    def features(self) -> list[float]:
        return features(self.source, self.output, self.src_ids, self.out_tokens, self.log_prob)

    def confidence(self, decode: DecodeConfig) -> float:
        """Its confidence with `decode`'s calibration (1.0 for an empty source, NaN without a log-prob)."""
        if not self.source.strip():
            return 1.0  # an empty line is translated as an empty line, certainly
        values = self.features()
        confidence = calibrated(values, weights_of(decode))
        if outside_calibration(self.source, self.src_ids, decode):
            confidence = min(confidence, UNCALIBRATED)
        return min(confidence, FLAGGED) if values[1] > 0 else confidence  # values[1]: the repetition flag


def features(source: str, output: str, src_ids: Sequence[int], out_tokens: int,
             log_prob: float) -> list[float]:
    """One sentence's `FEATURES`: its source and output texts, the source's piece ids (UNK counted),
    the output's token count (no EOS) and its log-prob (EOS included)."""
    ratio = math.log((len(output) + 1) / (len(source) + 1))
    src_words = set(_WORD.findall(source.casefold()))
    out_words = _WORD.findall(output.casefold())
    copied = sum(word in src_words for word in out_words) / len(out_words) if out_words else 0.0
    unknown = sum(i == UNK_ID for i in src_ids) / len(src_ids) if src_ids else 0.0
    # the linear term clipped: val's ratios span about [-0.5, 1], and a fit on them must not reward an
    # output ten times the length of a one-word source (the square keeps growing and penalises it)
    repetition = math.log1p(repetition_excess(source, output))
    return [log_prob / (out_tokens + 1), repetition, max(-1.0, min(1.0, ratio)), ratio * ratio,
            unknown, copied, math.log(out_tokens + 1)]


def calibrated(values: Sequence[float], weights: Sequence[float]) -> float:
    """sigmoid(w . values + b) for `weights` = (w..., b); NaN when a value is NaN."""
    if len(weights) != len(FEATURES) + 1:
        raise ValueError(f"confidence weights: {len(weights)} numbers, expected {len(FEATURES) + 1} "
                         f"({', '.join(FEATURES)}, bias)")
    z = sum(w * v for w, v in zip(weights, values)) + weights[-1]
    if math.isnan(z):
        return math.nan
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def weights_of(decode: DecodeConfig) -> tuple[float, ...]:
    """The calibration `decode` carries (`decode.calibration.weights`), else `DEFAULT`."""
    return decode.calibration.weights if decode.calibration.weights else DEFAULT


def outside_calibration(source: str, src_ids: Sequence[int], decode: DecodeConfig) -> bool:
    """Whether a source is unlike every one the calibration `decode` carries was fitted on: fewer
    pieces than its shortest, a smaller share of distinct words than its most repetitive (DEFAULT's
    bounds with `DEFAULT`), or a letter drawn out beyond any word's spelling (`_DRAWN_OUT`)."""
    fitted = bool(decode.calibration.weights)
    shortest = decode.calibration.min_pieces if fitted else DEFAULT_MIN_PIECES
    least = decode.calibration.min_distinct if fitted else DEFAULT_MIN_DISTINCT
    return (len(src_ids) < shortest or distinct_share(source) < least
            or _DRAWN_OUT.search(source.casefold()) is not None)


def distinct_share(source: str) -> float:
    """The share of distinct words (casefolded) among a source's words; 1.0 without a word."""
    words = _WORD.findall(source.casefold())
    return len(set(words)) / len(words) if words else 1.0


def log_prob_of(score: float, out_tokens: int, decode: DecodeConfig) -> float:
    """The log-prob behind an engine's `score` (log_prob / length_penalty(|y| + 1), |y| = out_tokens)."""
    search = decode.search
    penalty = length_penalty(float(out_tokens + 1), alpha=search.alpha, kind=search.length_penalty)
    return score * float(penalty)


def scored(source: str, output: str, src_ids: Sequence[int], out_tokens: int, score: float,
           decode: DecodeConfig) -> Scored:
    """A sentence as an engine returns it (its `score` with `decode`'s length penalty) as `Scored`."""
    return Scored(source, output, list(src_ids), out_tokens, log_prob_of(score, out_tokens, decode))


def text_confidence(sentences: Sequence[float]) -> float:
    """A text's confidence from its sentences': the least confident one's (a paragraph with one
    garbage sentence is flagged); 1.0 for a text without sentences, NaN when one is NaN."""
    if any(math.isnan(c) for c in sentences):
        return math.nan
    return min(sentences, default=1.0)
