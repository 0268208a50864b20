"""`mt.decode.translate`: `search_batch` (the one place a DecodeConfig becomes a search call) and
sources longer than the model can take.

A tiny random Transformer with max_positions 8 whose EOS logit is zeroed (tied output), so
outputs run to the length cap unless `max_len_limit = max_positions - 1` stops them.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig, SearchConfig
from mt.data.batching import collate_source
from mt.data.tokenizer import EOS_ID
from mt.decode.beam import beam_search
from mt.decode.engine import search_batch
from mt.decode.rules import SearchSettings
from mt.decode.search import greedy_search
from mt.decode.translate import translate_lines
from mt.errors import MTWarning
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")

LIMIT = 7  # max_positions - 1


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0, max_positions=8)
    model = Transformer(cfg, 24, 24, joint_vocab=True).eval()
    with torch.no_grad():
        model.tgt_embed.weight[EOS_ID] = 0.0  # EOS logit 0: rarely the best, so lengths hit the caps
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return collate_source([torch.randint(4, 24, (n,), generator=g).tolist() for n in (5, 1, 6, 3)])


def test_greedy_for_beam_1_beam_otherwise_and_nbest_within_the_model_limit(model):
    src, mask = batch()
    decode = DecodeConfig(search=SearchConfig(beam=1, alpha=0.6, max_len_a=2.0, max_len_b=20, no_repeat_ngram_size=0))  # the searches alone (the loop guard: tests/test_repeats.py)
    with torch.inference_mode():
        greedy = search_batch(model, src, mask, decode)
        assert greedy == greedy_search(model, src, mask,
                                       SearchSettings(max_len_a=2.0, max_len_b=20, forbid_unk=True,
                                                      max_len_limit=LIMIT))
        assert max(len(t) for t in greedy) == LIMIT  # the cap binds, and it is max_positions - 1
        assert search_batch(model, src, mask, decode, n_best=1) == beam_search(model, src, mask,
                                                                               SearchSettings(beam=1,
                                                                                              alpha=0.6,
                                                                                              length_penalty="gnmt", max_len_a=2.0, max_len_b=20, n_best=1, forbid_unk=True, max_len_limit=LIMIT))

        decode = dataclasses.replace(decode, search=dataclasses.replace(decode.search, beam=3))
        expected = beam_search(model, src, mask,
                               SearchSettings(beam=3, alpha=0.6, length_penalty="gnmt", max_len_a=2.0,
                                              max_len_b=20, n_best=2, forbid_unk=True, max_len_limit=LIMIT))
        assert search_batch(model, src, mask, decode, n_best=2) == expected
        assert search_batch(model, src, mask, decode) == [
            h[0].tokens for h in beam_search(model, src, mask,
                                             SearchSettings(beam=3, alpha=0.6, length_penalty="gnmt",
                                                            max_len_a=2.0, max_len_b=20, n_best=1,
                                                            forbid_unk=True, max_len_limit=LIMIT))]
        assert all(len(h.tokens) <= LIMIT for hyps in expected for h in hyps)


class CharTokenizer:
    """Test double for mt.data.tokenizer.Tokenizer: one source piece per character, ids as target text."""

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[4 + ord(c) % 20 for c in line] for line in lines]

    def decode_tgt(self, seqs: list[list[int]]) -> list[str]:
        return [" ".join(map(str, seq)) for seq in seqs]


def test_long_source_is_cut_to_the_model_limit_with_a_warning(model):
    tok, decode = CharTokenizer(), DecodeConfig(search=SearchConfig(beam=1, max_len_a=1.0, max_len_b=2))
    with pytest.warns(MTWarning, match="longer than 7 pieces are truncated"):
        got = translate_lines(model, tok, ["abcdefghijkl", "", "abc"], decode, device="cpu")
    assert got[0] == translate_lines(model, tok, ["abcdefg"], decode, device="cpu")[0]  # first LIMIT pieces
    assert got[1] == "" and got[2] == translate_lines(model, tok, ["abc"], decode, device="cpu")[0]


@pytest.mark.parametrize("beam, n_best, sampling", [(1, None, False), (3, None, False), (3, 2, False),
                                                    (1, 1, False), (1, None, True), (1, 3, True)])
def test_engine_hands_each_result_over_once_equal_to_what_it_returns(model, beam, n_best, sampling):
    from mt.decode.engine import NativeEngine

    g = torch.Generator().manual_seed(1)
    src_ids = [torch.randint(4, 24, (n,), generator=g).tolist() for n in (5, 1, 6, 3, 2)]
    decode = DecodeConfig(search=SearchConfig(beam=beam, alpha=0.6, max_len_a=0.5, max_len_b=1, sampling=sampling, seed=3))  # lengths differ
    handed: dict[int, object] = {}

    def on_result(i: int, results: list[tuple[list[int], float]]) -> None:
        assert i not in handed
        handed[i] = results

    found = NativeEngine(model, "cpu").search_ids(src_ids, decode, n_best=n_best, sentence_ids=list(range(5)),
                                                  on_result=on_result)
    assert sorted(handed) == list(range(5))
    for i, results in handed.items():
        if n_best is None:  # the one output; its score is NaN, which equals nothing
            assert len(results) == len(found[i]) == 1 and results[0][0] == found[i][0][0]
        else:
            assert results == found[i]
