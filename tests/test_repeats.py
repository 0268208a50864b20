"""The loop guard (`mt.decode.repeats`): n-gram bans and the repetition penalty on hand-made
histories, every search on a tiny random Transformer (which loops: random models repeat pieces),
and the output-level repetition check."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig, SearchConfig
from mt.data.batching import collate_source
from mt.decode.beam import beam_search
from mt.decode.constrained import constrained_beam_search
from mt.decode.engine import search_batch
from mt.decode.repeats import ban_repeated_ngrams, penalise_repeats, repetition_excess
from mt.decode.rules import Sampling, SearchSettings
from mt.decode.sampling import sample_search
from mt.decode.search import greedy_hypotheses, greedy_search
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")
NEG_INF = float("-inf")


def banned(history: list[list[int]], size: int, vocab: int = 10) -> list[list[int]]:
    log_probs = torch.zeros(len(history), vocab)
    ban_repeated_ngrams(log_probs, torch.tensor(history), size)
    return [torch.isinf(row).nonzero().squeeze(1).tolist() for row in log_probs]


def test_the_ngram_ban_names_the_tokens_that_would_repeat_an_ngram():
    assert banned([[5, 6, 7, 5, 6]], 3) == [[7]]  # 5 6 | 7 again
    assert banned([[5, 6, 7, 5, 6]], 2) == [[7]]  # 6 | 7 again
    assert banned([[5, 6, 7, 5, 6]], 1) == [[5, 6, 7]]  # no piece twice
    assert banned([[5, 6, 7, 5, 6]], 4) == [[]]  # 7 5 6 never seen before 5 6 ...: nothing
    assert banned([[5, 6, 7, 5, 6]], 0) == [[]]  # off
    assert banned([[5, 6]], 3) == [[]]  # too short to hold an n-gram
    assert banned([[1, 2, 9, 1, 3, 9, 1]], 2) == [[2, 3]]  # two windows match: both banned
    # 7 ends a matching window (4 7) and a non-matching one (5 7): banned whatever the write order
    assert banned([[4, 7, 5, 7, 4], [5, 7, 4, 7, 5]], 2) == [[7], [7]]
    assert banned([[3, 3, 3]], 2) == [[3]]  # a run of one piece stops at the n-gram size


def test_the_penalty_lowers_each_emitted_token_once():
    log_probs = torch.log_softmax(torch.randn(2, 6, generator=torch.Generator().manual_seed(0)), dim=1)
    before = log_probs.clone()
    penalise_repeats(log_probs, torch.tensor([[2, 2, 4], [5, 5, 5]]), 1.5)
    expected = before.clone()
    expected[0, 2], expected[0, 4], expected[1, 5] = before[0, 2] * 1.5, before[0, 4] * 1.5, before[1, 5] * 1.5
    assert torch.equal(log_probs, expected)
    penalise_repeats(log_probs, torch.tensor([[2], [5]]), 1.0)
    assert torch.equal(log_probs, expected)  # 1 = off


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(3)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0, max_positions=64)
    model = Transformer(cfg, 12, 12, joint_vocab=True).eval()  # 8 real pieces: a random model loops over them
    with torch.no_grad():
        model.tgt_embed.weight.mul_(0.3)  # flatter distributions: a penalty of 3 can move the argmax
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return collate_source([torch.randint(4, 12, (n,), generator=g).tolist() for n in (9, 3, 12, 6, 7, 10)])


def repeats_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def first_repeat(tokens: list[int], n: int) -> int:
    """The length of the longest prefix of `tokens` without a repeated n-gram."""
    return next((k - 1 for k in range(1, len(tokens) + 1) if repeats_ngram(tokens[:k], n)), len(tokens))


def test_every_search_keeps_the_guard_and_a_sentence_it_never_touches_is_unchanged(model):
    src, mask = sources()
    common = SearchSettings(max_len_a=2.0, max_len_b=6, forbid_unk=True)
    with torch.inference_mode():
        free = greedy_search(model, src, mask, common)
        assert any(repeats_ngram(t, 2) for t in free)  # the random model loops without the guard
        for n in (1, 2, 3):
            guarded = greedy_search(model, src, mask, dataclasses.replace(common, no_repeat_ngram_size=n))
            assert not any(repeats_ngram(t, n) for t in guarded)
            for before, after in zip(free, guarded):  # the same until a ban fires (never: byte-identical)
                k = first_repeat(before, n)
                assert after[:k] == before[:k] and (after == before or k < len(before))
        beam = dataclasses.replace(common, beam=4, alpha=0.6, length_penalty="gnmt", n_best=4, no_repeat_ngram_size=2)
        for hyps in beam_search(model, src, mask, beam):
            assert hyps and not any(repeats_ngram(h.tokens, 2) for h in hyps)
        draw = dataclasses.replace(common, n_best=3, alpha=0.6, length_penalty="gnmt", no_repeat_ngram_size=2,
                       sampling=Sampling(temperature=1.0, top_k=0, top_p=1.0, seed=0))
        for hyps in sample_search(model, src, mask, draw):
            assert not any(repeats_ngram(h.tokens, 2) for h in hyps)
        terms = [[[5, 6]]] * src.size(0)
        for hyps in constrained_beam_search(model, src, mask, terms, dataclasses.replace(beam, n_best=1, no_repeat_ngram_size=3)):
            tokens = hyps[0].tokens
            assert not repeats_ngram(tokens, 3) and any(tokens[i:i + 2] == [5, 6] for i in range(len(tokens)))


def test_the_penalty_shortens_runs_and_decode_config_reaches_every_search(model):
    src, mask = sources()
    with torch.inference_mode():
        base = DecodeConfig(search=SearchConfig(beam=1, max_len_a=2.0, max_len_b=6))
        free = search_batch(model, src, mask, base)
        guarded = search_batch(model, src, mask, dataclasses.replace(
            base, search=dataclasses.replace(base.search, no_repeat_ngram_size=2)))
        assert guarded == greedy_search(model, src, mask,
                                        SearchSettings(max_len_a=2.0, max_len_b=6, forbid_unk=True,
                                                       no_repeat_ngram_size=2, max_len_limit=63)) != free
        penalised = search_batch(model, src, mask, dataclasses.replace(
            base, search=dataclasses.replace(base.search, repetition_penalty=3.0)))
        assert penalised != free
        distinct = sum(len(set(t)) / max(1, len(t)) for t in penalised) / len(penalised)
        assert distinct > sum(len(set(t)) / max(1, len(t)) for t in free) / len(free)
        beam = dataclasses.replace(base, search=dataclasses.replace(base.search, beam=3, no_repeat_ngram_size=2))
        assert not any(repeats_ngram(t, 2) for t in search_batch(model, src, mask, beam))
        sampled = dataclasses.replace(base, search=dataclasses.replace(base.search, sampling=True, no_repeat_ngram_size=2))
        assert not any(repeats_ngram(t, 2) for t in search_batch(model, src, mask, sampled))


def test_greedy_hypotheses_score_as_beam_one_does(model):
    src, mask = sources()
    with torch.inference_mode():
        greedy = greedy_hypotheses(model, src, mask,
                                   SearchSettings(max_len_a=2.0, max_len_b=6, forbid_unk=True, alpha=0.6,
                                                  length_penalty="gnmt", no_repeat_ngram_size=2))
        beam = beam_search(model, src, mask,
                           SearchSettings(beam=1, alpha=0.6, length_penalty="gnmt", n_best=1, max_len_a=2.0,
                                          max_len_b=6, forbid_unk=True, no_repeat_ngram_size=2))
    assert greedy == beam  # tokens, log-prob and score: the same float32 sums


@pytest.mark.parametrize(("source", "output", "excess"), [
    ("A man is riding a bike.", "Ein Mann fährt Fahrrad.", 0),
    ("A man and a dog.", "Ein Mann und ein Hund.", 0),  # one repeat more than the source is normal
    ("hello", "Ein Looto.", 0),
    ("A man is holding balloons.", "Ein Demelspremmmmmmmmel.", 8 - 3),  # a run of 8 m
    ("ha ha ha ha ha ha ha ha", "ha ha ha ha ha ha ha ha", 0),  # as often as the input: no loop
    ("ha ha", "Ein ha ha ha ha ha harzzte.", 5 - 3),
    ("aaaaaaaa", "aaaaaaa", 0),
    ("Schifffahrt", "Schifffahrt", 0),  # three equal letters are German
    ("Yes", "1000000 Euro", 0),  # digits and spaces are not loops
    ("Yes", "Siebererer kämpfen.", 3 - 2),  # a unit of letters three times back to back
    ("Bananas", "Bananen", 0),  # twice is German
    ("hahahahaha", "hahahahaha", 0),
])
def test_repetition_excess(source, output, excess):
    assert repetition_excess(source, output) == excess
    assert math.isfinite(repetition_excess(source * 1000, output * 1000))


@pytest.mark.requires("fastapi", "prometheus_client")
def test_mt_serve_flags_set_the_guard_over_the_checkpoints():
    from mt.config import Config
    from mt.errors import MTError
    from mt.serve.model import server_decode
    from mt.serve.settings import ServeSettings

    cfg = Config()
    decode, _ = server_decode(ServeSettings(no_repeat_ngram=0, repetition_penalty=1.3), cfg)
    assert (decode.search.no_repeat_ngram_size, decode.search.repetition_penalty) == (0, 1.3)
    assert server_decode(ServeSettings(), cfg)[0] == cfg.decode
    with pytest.raises(MTError, match="--repetition-penalty: must be a finite number >= 1"):
        ServeSettings(repetition_penalty=0.9)
    with pytest.raises(MTError, match="--no-repeat-ngram: must be 0"):
        ServeSettings(no_repeat_ngram=-2)
