"""Sentence confidences (`mt.decode.confidence`), their calibration (`mt.train.confidence_fit`) and
ranking statistics (`mt.eval.confidence`): hand-made values, a tiny random checkpoint through the
library and the real CLI, and a short training run that stores its calibration."""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import copy_run

import mt.train.confidence_fit
import mt.train.loop
from mt.config import CalibrationConfig, Config, DecodeConfig, SearchConfig
from mt.data.tokenizer import UNK_ID
from mt.decode.confidence import (
    DEFAULT,
    FEATURES,
    FLAGGED,
    LOW,
    UNCALIBRATED,
    Scored,
    calibrated,
    log_prob_of,
    text_confidence,
)
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.decode.search import length_penalty
from mt.decode.translate import search_lines, translate_lines, translate_texts, translate_texts_scored
from mt.errors import MTError
from mt.eval.confidence import ranks, roc_auc, spearman
from mt.model.checkpoint import load_checkpoint, read_checkpoint
from mt.text.segment import segmenter_for
from mt.train.confidence_fit import fit_weights

pytestmark = pytest.mark.usefixtures("one_thread")


def test_ranks_spearman_and_auc_by_hand():
    assert ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [5, 5, 5]) != spearman([1, 2, 3], [5, 5, 5])  # constant: NaN
    assert spearman([1, 2, math.nan, 3], [1, 2, 0, 3]) == pytest.approx(1.0)  # NaN pairs left out
    assert roc_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert roc_auc([0.1], [0.9]) == 0.0
    assert roc_auc([0.5, 0.9], [0.5, 0.1]) == pytest.approx((0.5 + 1 + 1 + 1) / 4)  # a tie counts half


def test_fit_weights_recovers_a_known_logistic_and_zeroes_a_constant_feature():
    g = random.Random(0)
    true = (1.5, -2.0, 0.3)  # two features and a bias; the third feature is constant
    rows = [[g.gauss(0, 1), g.gauss(1, 2), 7.0] for _ in range(3000)]
    targets = [1 / (1 + math.exp(-(true[0] * a + true[1] * b + true[2]))) for a, b, _ in rows]
    weights = fit_weights(rows, targets)
    assert weights[0] == pytest.approx(1.5, abs=0.05) and weights[1] == pytest.approx(-2.0, abs=0.05)
    assert weights[2] == 0.0 and weights[3] == pytest.approx(0.3, abs=0.05)


def scored(source: str, output: str, log_prob: float, tokens: int = 5) -> Scored:
    return Scored(source, output, [10, 11, 12, 13, UNK_ID], tokens, log_prob)


def test_confidence_from_a_score_a_repetition_and_nothing():
    decode = DecodeConfig(search=SearchConfig(alpha=0.8, length_penalty="gnmt"))
    log_prob = -3.25
    score = log_prob / float(length_penalty(7.0, alpha=0.8, kind="gnmt"))
    assert log_prob_of(score, 6, decode) == pytest.approx(log_prob)  # the engine's score, undone exactly
    good, bad = scored("A man rides.", "Ein Mann fährt.", -1.0), scored("A man rides.", "Ein Mann fährt.", -20.0)
    assert 0.0 < bad.confidence(decode) < good.confidence(decode) < 1.0
    assert good.features()[FEATURES.index("unknown_share")] == pytest.approx(1 / 5)
    assert good.confidence(decode) == calibrated(good.features(), DEFAULT)  # no calibration: the default
    calibrated_decode = dataclasses.replace(decode, calibration=CalibrationConfig((0.0,) * len(FEATURES) + (2.0,)))
    assert good.confidence(calibrated_decode) == pytest.approx(1 / (1 + math.exp(-2.0)))
    loop = scored("A man rides.", "Ein Mannnnnnnnnn fährt.", -1.0)  # same log-prob, a character loop
    assert loop.confidence(decode) <= FLAGGED < good.confidence(decode)
    assert scored("  ", "", 0.0).confidence(decode) == 1.0  # an empty line: certainly empty
    # a source shorter than the calibration's shortest: at most UNCALIBRATED, however probable its output
    sure = dataclasses.replace(calibrated_decode, calibration=CalibrationConfig((0.0,) * len(FEATURES) + (5.0,),
                                                                            min_pieces=5))
    short = Scored("Menu", "Männer.", [10, 11], 2, -0.1)
    assert short.confidence(sure) == UNCALIBRATED < LOW < good.confidence(sure)
    assert short.confidence(dataclasses.replace(sure, calibration=dataclasses.replace(sure.calibration, min_pieces=0))) > LOW  # a fit without the bound
    assert short.confidence(decode) <= UNCALIBRATED  # DEFAULT's bound (DEFAULT_MIN_PIECES)
    said_again = Scored("no no no no no", "freie nackte Oberkörper", [10, 10, 10, 10, 10], 4, -0.1)
    assert said_again.confidence(dataclasses.replace(sure, calibration=dataclasses.replace(sure.calibration, min_distinct=0.6))) == UNCALIBRATED
    assert said_again.confidence(dataclasses.replace(sure, calibration=dataclasses.replace(sure.calibration, min_distinct=0.2))) > LOW  # as repetitive as the fit's
    # a letter drawn out past any word's spelling (four in a row, any case) is outside every calibration
    drawn = Scored("Hmmmmmm okay then", "Menschen beim Hirmen", [10, 11, 12, 13, 14, 15], 4, -0.1)
    assert drawn.confidence(sure) == UNCALIBRATED and Scored("NOOOO way, man", "x", [10] * 6, 1, -0.1).confidence(sure) == UNCALIBRATED
    assert Scored("Schifffahrt is fun", "y", [10, 11, 12, 13, 14, 15], 1, -0.1).confidence(sure) > LOW  # three: a word
    assert Scored("It costs 10000 dollars....", "z", [10, 11, 12, 13, 14, 15], 1, -0.1).confidence(sure) > LOW  # not letters
    assert math.isnan(scored("A man.", "Ein Mann.", math.nan).confidence(decode))
    assert text_confidence([0.9, 0.2, 0.7]) == 0.2 and text_confidence([]) == 1.0
    with pytest.raises(ValueError, match="confidence weights"):
        calibrated(good.features(), (1.0, 2.0))


def test_scored_translation_is_plain_translation_with_a_confidence(random_ckpt: Path):
    ckpt = read_checkpoint(random_ckpt)
    model, tok, cfg = ckpt.model("cpu"), ckpt.tokenizer, ckpt.config
    lines = ["a b c d", "", "e f g", "a a a a a a a a"]
    for beam in (1, 3):
        decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=beam, no_repeat_ngram_size=2))
        found = search_lines(model, tok, lines, decode, device="cpu").scored()
        assert [s.output for s in found] == translate_lines(model, tok, lines, decode, device="cpu")
        assert all(0.0 <= s.confidence(decode) <= 1.0 for s in found) and found[1].confidence(decode) == 1.0
        assert all(math.isfinite(s.log_prob) and s.log_prob <= 0 for s in found)
        texts = ["a b c. e f g!", "", "d e"]
        segmenter = segmenter_for(cfg.data.pairs[0].src_lang)
        paragraphs = translate_texts_scored(model, tok, texts, decode, device="cpu", segmenter=segmenter)
        assert [t for t, _ in paragraphs] == translate_texts(model, tok, texts, decode, device="cpu",
                                                             segmenter=segmenter)
        assert paragraphs[1][1] == 1.0 and all(0.0 <= c <= 1.0 for _, c in paragraphs)


def test_mt_translate_scores(random_ckpt: Path, tmp_path: Path):
    src = tmp_path / "in.txt"
    src.write_text("a b c d\n\ne f g. a b\n")
    run = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(random_ckpt), "-i", str(src), "--beam",
                          "2", "--no-repeat-ngram", "2", "--scores"], capture_output=True, text=True, check=True)
    ckpt = read_checkpoint(random_ckpt)
    decode = dataclasses.replace(ckpt.config.decode, search=dataclasses.replace(ckpt.config.decode.search, beam=2, no_repeat_ngram_size=2))
    expected = translate_texts_scored(ckpt.model("cpu"), ckpt.tokenizer, src.read_text().splitlines(), decode,
                                      device="cpu", segmenter=segmenter_for(ckpt.config.data.pairs[0].src_lang))
    assert run.stdout.splitlines() == [f"{c:.3f}\t{t}" for t, c in expected] and expected[1] == ("", 1.0)
    with pytest.raises(MTError, match="--repetition-penalty: must be a finite number >= 1"):
        apply_overrides(decode, DecodeOverrides(repetition_penalty=0.5))
    with pytest.raises(MTError, match="--no-repeat-ngram: must be 0"):
        apply_overrides(decode, DecodeOverrides(no_repeat_ngram=-1))
    flags = apply_overrides(DecodeConfig(), DecodeOverrides(no_repeat_ngram=4, repetition_penalty=1.2))
    assert (flags.search.no_repeat_ngram_size, flags.search.repetition_penalty) == (4, 1.2)


def test_a_run_with_fit_confidence_stores_its_calibration(tmp_path: Path, tiny_run: Config,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mt.train.confidence_fit, "FIT_SENTENCES", 20)
    cfg = copy_run(tiny_run, tmp_path, max_updates=4, valid_every=0, fit_confidence=True, threads=1,
                   valid_max_sentences=3)
    final = mt.train.loop.train(cfg)
    state = load_checkpoint(final)
    fit = state["confidence_fit"]
    assert fit["valid_sentences"] == 20 and fit["features"] == list(FEATURES)
    assert state["config"]["decode"]["calibration"]["weights"] == fit["weights"] and len(fit["weights"]) == len(FEATURES) + 1
    assert read_checkpoint(final).config.decode.calibration.weights == tuple(fit["weights"])  # what translate and serve use
    assert read_checkpoint(final).config.decode.calibration.min_pieces == fit["min_source_pieces"] > 0
    assert read_checkpoint(final).config.decode.calibration.min_distinct == fit["min_distinct_share"] > 0
    assert "confidence fitted on 20 val sentences" in (cfg.run_dir / "train.log").read_text()
    assert torch.isfinite(torch.tensor(fit["weights"])).all()
