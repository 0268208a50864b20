"""Forced-decoding scores of sentence pairs (`mt score`'s library): equal to beam search's own
scores, independent of batching, in input order, with clean errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from mt.config import Config
from mt.data.batching import collate_source, pair_batches
from mt.data.tokenizer import Tokenizer
from mt.decode.beam import beam_search
from mt.decode.forced import PairScore, score_pairs
from mt.decode.rules import SearchSettings
from mt.decode.search import length_penalty
from mt.errors import MTError, MTWarning
from mt.model.ensemble import Ensemble, max_positions
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")

SRC = ["A dog runs in the park.", "Two men are playing football.", "", "A woman with a red hat sits.",
       "Children play.", "A man is riding a bike down a long and winding mountain road in the rain."]


def test_pair_batches_cover_all_pairs_within_budget():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(0, 30, 200), rng.integers(0, 30, 200)
    batches = pair_batches(src, tgt, max_tokens=300, max_sentences=16)
    assert sorted(np.concatenate(batches).tolist()) == list(range(200))
    for b in batches:
        assert len(b) <= 16
        assert len(b) == 1 or len(b) * (src[b].max() + 1 + tgt[b].max() + 1) <= 300
    order = np.concatenate(batches)
    assert (np.diff(src[order]) <= 0).all()  # longest sources first
    assert [b.tolist() for b in pair_batches(np.array([100]), np.array([100]), max_tokens=10, max_sentences=4)] == [[0]]


@pytest.fixture(scope="module")
def setup(tiny_run: Config) -> tuple[Transformer, Tokenizer, Config]:
    tok = Tokenizer.from_files(tiny_run.run_dir)
    torch.manual_seed(0)
    model = Transformer(tiny_run.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint).eval()
    return model, tok, tiny_run


def _beam(model, tok: Tokenizer, cfg: Config, lines: list[str]):
    ids = tok.encode_src(lines)
    src, mask = collate_source(ids)
    with torch.inference_mode():
        return beam_search(model, src, mask,
                           SearchSettings(beam=4, alpha=cfg.decode.search.alpha,
                                          length_penalty=cfg.decode.search.length_penalty, max_len_a=1.0,
                                          max_len_b=3, n_best=4, forbid_unk=True))


def test_scores_equal_beam_search_scores_of_its_outputs(setup):
    model, tok, cfg = setup
    lines = [s for s in SRC if s]
    hyps = _beam(model, tok, cfg, lines)
    pairs = [(line, h) for line, nbest in zip(lines, hyps) for h in nbest]
    texts = tok.decode_tgt([h.tokens for _, h in pairs])
    # Compare the pairs whose detokenised text encodes back to the same pieces (most of them).
    same = [(line, h, text) for (line, h), text in zip(pairs, texts) if tok.encode_tgt([text])[0] == h.tokens]
    assert len(same) >= len(pairs) // 2
    scores = score_pairs(model, tok, [s for s, _, _ in same], [t for _, _, t in same], cfg.decode,
                         max_positions=max_positions(model), device="cpu")
    assert [s.log_prob for s in scores] == pytest.approx([h.log_prob for _, h, _ in same], abs=1e-4)
    assert [s.normalized for s in scores] == pytest.approx([h.score for _, h, _ in same], abs=1e-4)
    for s, (_, h, _) in zip(scores, same):
        assert s.length == len(h.tokens) + 1
        assert s.per_token == pytest.approx(h.log_prob / (len(h.tokens) + 1), abs=1e-4)


def test_scores_independent_of_batching_and_in_input_order(setup):
    model, tok, cfg = setup
    tgt = ["Ein Hund rennt im Park.", "Zwei Männer spielen Fußball.", "Leer?", "", "Kinder spielen.",
           "Ein Mann fährt Fahrrad."]
    big = score_pairs(model, tok, SRC, tgt, cfg.decode, max_positions=max_positions(model), device="cpu")
    one_each = dataclasses.replace(cfg.decode, resources=dataclasses.replace(cfg.decode.resources, max_tokens=1))
    small = score_pairs(model, tok, SRC, tgt, one_each, max_positions=max_positions(model), device="cpu")
    assert [s.log_prob for s in big] == pytest.approx([s.log_prob for s in small], abs=1e-4)
    for i in range(len(SRC)):  # each pair alone gives its line's score
        alone = score_pairs(model, tok, [SRC[i]], [tgt[i]], cfg.decode, max_positions=max_positions(model),
                            device="cpu")[0]
        assert alone.log_prob == pytest.approx(big[i].log_prob, abs=1e-4)
    assert big[3].length == 1  # an empty target is scored as EOS alone
    assert all(s.log_prob < 0 for s in big)
    kind, alpha = cfg.decode.search.length_penalty, cfg.decode.search.alpha
    assert big[0].normalized == pytest.approx(big[0].log_prob / length_penalty(big[0].length, alpha=alpha, kind=kind))
    model.train()
    score_pairs(model, tok, SRC[:1], tgt[:1], cfg.decode, max_positions=max_positions(model), device="cpu")
    assert model.training  # mode restored
    model.eval()


def test_ensemble_scores_and_errors(setup):
    model, tok, cfg = setup
    ens = Ensemble([model, model])
    tgt = ["Ein Hund.", "Zwei Männer."]
    single = score_pairs(model, tok, SRC[:2], tgt, cfg.decode, max_positions=max_positions(model), device="cpu")
    double = score_pairs(ens, tok, SRC[:2], tgt, cfg.decode, max_positions=max_positions(ens), device="cpu")
    assert [s.log_prob for s in double] == pytest.approx([s.log_prob for s in single], abs=1e-4)
    with pytest.raises(MTError, match="2 source lines but 1 target lines"):
        score_pairs(model, tok, SRC[:2], tgt[:1], cfg.decode, max_positions=64, device="cpu")
    with pytest.warns(MTWarning, match="truncated"), pytest.raises(MTError, match="target line 2: .* limit of 3"):
        score_pairs(model, tok, SRC[:2], ["Hund", "Ein sehr langer Satz mit vielen Wörtern."], cfg.decode,
                    max_positions=4, device="cpu")
    assert isinstance(single[0], PairScore)
