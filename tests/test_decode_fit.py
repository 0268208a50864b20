"""Decoding fitted on validation after training (mt/train/decode_fit.py): the search over alpha on
made-up BLEU curves, and a tiny run whose final checkpoint carries the alpha it chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import copy_run

import mt.train.averaging
import mt.train.decode_fit
import mt.train.loop
from mt.config import Config, DecodeConfig
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.model.checkpoint import load_checkpoint, read_checkpoint
from mt.train.decode_fit import MIN_GAIN, fit_alpha
from mt.train.validate import Validator


def _curve(peak: float, height: float = 3.0) -> tuple[list[float], object]:
    """BLEU that rises to `height` above 30 at alpha `peak` and falls away; records each call."""
    calls: list[float] = []

    def bleu_at(alpha: float) -> float:
        calls.append(alpha)
        return 30.0 + height - abs(alpha - peak) * 2.0

    return calls, bleu_at


@pytest.mark.parametrize("peak", [1.4, 1.2, 0.2, 0.0, 2.2])
def test_fit_alpha_finds_the_peak_of_a_unimodal_curve_in_few_decodes(peak: float) -> None:
    calls, bleu_at = _curve(peak)
    best, tried = fit_alpha(bleu_at, 0.6)
    assert best == pytest.approx(peak)
    assert len(calls) == len(set(calls)) <= 8  # each alpha decoded once; never the whole 0-2.4 grid in 0.2 steps
    assert tried[round(best, 2)] == max(tried.values())


def test_fit_alpha_takes_the_near_end_of_a_flat_top() -> None:
    """The demo model's val curve (Intel Xeon run): flat from 1.4 to 2.2, where an argmax took 2.0
    and lost 0.6 test BLEU against 1.4; within NEAR_BEST of the best, the nearest to 0.6 wins."""
    val = {0.6: 36.4101, 1.0: 36.6276, 1.4: 36.9488, 1.6: 37.0299, 1.8: 37.0249, 2.0: 37.0507, 2.2: 37.0002}
    best, tried = fit_alpha(lambda a: val.get(round(a, 2), 36.0), 0.6)
    assert best == 1.4 and set(tried) == set(val)


def test_fit_alpha_keeps_the_configured_alpha_without_a_real_gain() -> None:
    _, flat = _curve(0.6, height=0.0)
    assert fit_alpha(lambda a: 30.0, 0.6)[0] == 0.6  # flat: no change
    assert fit_alpha(flat, 0.6)[0] == 0.6  # the start is the peak
    small = fit_alpha(lambda a: 30.0 + (MIN_GAIN / 2 if a == 1.0 else 0.0), 0.6)
    assert small[0] == 0.6 and small[1][1.0] > small[1][0.6]  # better, but by less than MIN_GAIN


def test_a_run_with_fit_alpha_stores_the_chosen_alpha_in_its_final_checkpoint(
        tmp_path: Path, tiny_run: Config, one_thread: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40-update tiny model scores ~0 BLEU whatever alpha: its val BLEU (really decoded, with the
    alpha asked for) gets a made-up curve peaking at 1.4 added, which the fit must find and store."""
    real_bleu, seen = Validator.bleu, []

    def bleu_with_a_peak(self: Validator, model: object, decode: DecodeConfig, max_sentences: int) -> float:
        seen.append((decode.search.alpha, max_sentences))
        return real_bleu(self, model, decode, max_sentences) + 3.0 - 2.0 * abs(decode.search.alpha - 1.4)

    monkeypatch.setattr(Validator, "bleu", bleu_with_a_peak)
    monkeypatch.setattr(mt.train.decode_fit, "FIT_SENTENCES", 20)  # of the 1,014 val lines: a cheap test
    cfg = copy_run(tiny_run, tmp_path, max_updates=40, valid_every=0, fit_alpha=True, threads=1,
                   valid_max_sentences=3)
    final = mt.train.loop.train(cfg)
    state = load_checkpoint(final)
    fit = state["decode_fit"]
    assert fit["was"] == tiny_run.decode.search.alpha and fit["beam"] == tiny_run.decode.search.beam
    assert fit["alpha"] == pytest.approx(1.4) and state["config"]["decode"]["search"]["alpha"] == fit["alpha"]
    assert sorted(float(a) for a in fit["valid_bleu"]) == sorted(alpha for alpha, _ in seen)
    assert {n for _, n in seen} == {20} and fit["valid_sentences"] == 20  # FIT_SENTENCES, not validation's 3
    # what translate, evaluate and serve start from: the checkpoint's decode section
    stored = read_checkpoint(final).config.decode
    assert apply_overrides(stored, DecodeOverrides()).search.alpha == fit["alpha"]
    log = (cfg.run_dir / "train.log").read_text()
    assert "decoding fitted on 20 val sentences (beam 2" in log and f"stored in {final.name}" in log
    # a finished run resumed: the fit is there, nothing is done twice
    mt.train.loop.train(cfg, resume=True)
    assert (cfg.run_dir / "train.log").read_text().count("decoding fitted on ") == 1


@pytest.mark.parametrize("averaged_wins", [True, False])
def test_the_average_is_kept_or_dropped_by_beam_bleu_on_the_fits_lines(
        tmp_path: Path, tiny_run: Config, one_thread: None, monkeypatch: pytest.MonkeyPatch, averaged_wins: bool) -> None:
    """With fit_alpha, averaged.pt against best.pt is decided by beam BLEU at the configured alpha
    (the tiny models' greedy val BLEU ties at ~0, which alone would keep the average); the winner's
    figure seeds the fit, which does not decode that alpha again."""
    real_beam_bleu, calls = mt.train.decode_fit.beam_bleu, []

    def made_up(model: object, validator: Validator, decode: DecodeConfig, alpha: float) -> float:
        calls.append(alpha)
        real_beam_bleu(model, validator, decode, alpha)  # really decoded (FIT_SENTENCES lines)
        return 50.0 + (len(calls) == 1) * (1 if averaged_wins else -1)  # the average is decoded first

    monkeypatch.setattr(mt.train.averaging, "beam_bleu", made_up)
    monkeypatch.setattr(mt.train.decode_fit, "FIT_SENTENCES", 20)
    cfg = copy_run(tiny_run, tmp_path, max_updates=20, valid_every=0, save_every=5, average_last=2, fit_alpha=True,
                   threads=1, valid_max_sentences=3)
    final = mt.train.loop.train(cfg)
    ckpts = cfg.run_dir / "checkpoints"
    assert calls == [tiny_run.decode.search.alpha] * 2
    assert final == ckpts / ("averaged.pt" if averaged_wins else "best.pt")
    assert (ckpts / "averaged.pt").is_file() == averaged_wins
    [record] = [r for r in map(json.loads, (cfg.run_dir / "metrics.jsonl").read_text().splitlines())
                if r["kind"] == "averaged"]
    assert (record["beam_bleu"], record["best_beam_bleu"]) == ((51.0, 50.0) if averaged_wins else (49.0, 50.0))
    fit = load_checkpoint(final)["decode_fit"]
    assert fit["valid_bleu"][str(round(tiny_run.decode.search.alpha, 2))] == (51.0 if averaged_wins else 50.0)
    log = (cfg.run_dir / "train.log").read_text()
    assert "val BLEU on 20 sentences" in log
