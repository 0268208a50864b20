"""Sampling: golden pieces, limits that equal greedy, and the distribution of many draws.

`MarkovModel` is a test double whose next-token distribution is a fixed table indexed by the
previous token, so the exact probability of every output sequence is known and the empirical
distribution of many samples can be compared with it. Every draw comes from fixed seeds: the
statistical checks are deterministic (they cannot flake), and their bounds are wide enough
(5 standard deviations per outcome) that a correct sampler passes them for any seed, yet
narrow enough to reject a sampler with the wrong temperature (checked below).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from test_search import SOURCES, TinyRNN, make_batch, mask_log_probs

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode.forced import force_decode_score
from mt.decode.rules import Sampling, SearchSettings, max_output_lengths
from mt.decode.sampling import draw_tokens, filter_log_probs, sample_search, sample_uniforms
from mt.decode.search import greedy_search, length_penalty

NEG_INF = float("-inf")

pytestmark = pytest.mark.usefixtures("one_thread")


def sample(model, src, mask, *, n=1, temperature=1.0, top_k=0, top_p=1.0, seed=0, a=1.5, b=3, forbid_unk=True,
           ids=None, alpha=0.6, kind="gnmt"):
    return sample_search(model, src, mask,
                         SearchSettings(n_best=n, alpha=alpha, length_penalty=kind, max_len_a=a, max_len_b=b,
                                        forbid_unk=forbid_unk, sampling=Sampling(temperature=temperature,
                                                                                 top_k=top_k, top_p=top_p,
                                                                                 seed=seed)), sentence_ids=ids)


# ---------------------------------------------------------------- small pieces, golden values


def test_filter_log_probs_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    lp = probs.log()

    def kept(**kw):
        return filter_log_probs(lp, Sampling(**{"temperature": 1.0, "top_k": 0, "top_p": 1.0, **kw})).exp()

    torch.testing.assert_close(kept(), probs)
    torch.testing.assert_close(kept(top_k=2), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # nucleus: keep a token while the mass before it is below p
    torch.testing.assert_close(kept(top_p=0.6), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(kept(top_p=0.81), torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    torch.testing.assert_close(kept(top_p=0.49), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(kept(top_p=0.51), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(kept(top_p=0.01), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))  # the best always stays
    root = probs.sqrt() / probs.sqrt().sum()
    torch.testing.assert_close(kept(temperature=2.0), root)
    # temperature first, then top-k, then the nucleus of what is left
    torch.testing.assert_close(kept(temperature=2.0, top_k=3, top_p=0.9),
                               torch.cat([root[:, :3] / root[:, :3].sum(), torch.zeros(1, 1)], dim=1))
    banned = lp.clone()
    banned[0, 0] = NEG_INF
    assert kept(top_k=0).sum() == pytest.approx(1.0)
    out = filter_log_probs(banned, Sampling(temperature=0.5, top_k=2, top_p=1.0)).exp()
    assert out[0, 0] == 0.0 and out[0, 3] == 0.0 and out.sum() == pytest.approx(1.0)
    for bad in ({"temperature": 0.0}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            filter_log_probs(lp, Sampling(**{"temperature": 1.0, "top_k": 0, "top_p": 1.0, **bad}))


def test_draw_tokens_inverse_cdf_by_hand():
    probs = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25, 0.0], dtype=torch.float64)
    lp = probs.log().expand(7, -1)
    u = torch.tensor([0.0, 0.2499, 0.25, 0.7499, 0.75, 0.9999, 1.0 - 2.0 ** -53], dtype=torch.float64)
    assert draw_tokens(lp, u).tolist() == [1, 1, 3, 3, 4, 4, 4]  # zero-probability tokens never drawn
    one_hot = torch.full((2, 5), NEG_INF)
    one_hot[:, 2] = 0.0
    assert draw_tokens(one_hot, torch.tensor([0.0, 0.999999])).tolist() == [2, 2]


def test_sample_uniforms_keyed_by_seed_sentence_and_sample():
    a = sample_uniforms(7, [(0, 0), (0, 1), (5, 0)], 4)
    assert a.shape == (3, 4) and a.dtype == torch.float64 and bool(((a >= 0) & (a < 1)).all())
    b = sample_uniforms(7, [(5, 0), (0, 0)], 6)  # other order, other length: same streams
    torch.testing.assert_close(b[0, :4], a[2])
    torch.testing.assert_close(b[1, :4], a[0])
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], a[2])
    assert not torch.equal(sample_uniforms(8, [(0, 0)], 4)[0], a[0])
    torch.manual_seed(123)  # the global RNG plays no part
    torch.testing.assert_close(sample_uniforms(7, [(0, 0)], 4)[0], a[0])


# ---------------------------------------------------------------- limits equal to greedy


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_low_temperature_and_top1_equal_greedy(seed):
    model = TinyRNN(12, seed=seed, eos_bias=1.0)
    src, mask = make_batch(SOURCES)
    greedy = greedy_search(model, src, mask, SearchSettings(max_len_a=1.5, max_len_b=3, forbid_unk=True))
    cold = sample(model, src, mask, n=3, temperature=1e-6, seed=seed)
    top1 = sample(model, src, mask, n=3, top_k=1, temperature=1.5, seed=seed)
    tiny_nucleus = sample(model, src, mask, n=3, top_p=1e-6, seed=seed)
    for found in (cold, top1, tiny_nucleus):
        assert [[h.tokens for h in hyps] for hyps in found] == [[g] * 3 for g in greedy]
    warm = sample(model, src, mask, n=3, temperature=1.0, seed=seed)
    assert [[h.tokens for h in hyps] for hyps in warm] != [[g] * 3 for g in greedy]  # sampling does sample


# ---------------------------------------------------------------- the distribution of many draws


class RowCache:
    """MarkovModel needs no decoder state beyond the last token, which search feeds back."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def reorder(self, index: torch.Tensor) -> RowCache:
        return RowCache(index.numel())

    def reorder_beams(self, index: torch.Tensor) -> RowCache:
        return self.reorder(index)


class MarkovModel:
    """Next-token probabilities = table[previous token] (BOS's row for the first step); V = 8."""

    def __init__(self, table: torch.Tensor) -> None:
        self.log_table = table.log()  # (V, V)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode_step(self, tokens, memory, src_mask, cache):
        return self.log_table[tokens[:, 0]].clone(), RowCache(tokens.size(0))


#                  PAD  UNK   BOS  EOS   a     b     c     d
TABLE = torch.tensor([
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # PAD (never fed)
    [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],  # after UNK (never fed: UNK forbidden)
    [0.0, 0.05, 0.0, 0.05, 0.45, 0.25, 0.12, 0.08],  # first step
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # EOS (never fed)
    [0.0, 0.02, 0.0, 0.30, 0.10, 0.38, 0.15, 0.05],  # after a
    [0.0, 0.10, 0.0, 0.50, 0.20, 0.05, 0.10, 0.05],  # after b
    [0.0, 0.00, 0.0, 0.20, 0.20, 0.20, 0.20, 0.20],  # after c
    [0.0, 0.05, 0.0, 0.05, 0.60, 0.10, 0.10, 0.10],  # after d
]).clamp(min=1e-30)  # log(0) would be -inf anyway; keep the table finite and exact enough
REAL = [4, 5, 6, 7]


def reference_step(probs: list[float], *, temperature: float, top_k: int, top_p: float, force_eos: bool) -> list[float]:
    """The sampling distribution of one step, written out plainly (no tensors)."""
    allowed = [t not in (PAD_ID, BOS_ID, UNK_ID) and (not force_eos or t == EOS_ID) for t in range(len(probs))]
    w = [p ** (1.0 / temperature) if ok and p > 1e-20 else 0.0 for p, ok in zip(probs, allowed)]
    w = [x / sum(w) for x in w]
    order = sorted(range(len(w)), key=lambda t: -w[t])
    if top_k:  # the nucleus is taken from the renormalised top-k distribution
        w = [x if t in order[:top_k] else 0.0 for t, x in enumerate(w)]
        w = [x / sum(w) for x in w]
    mass, nucleus = 0.0, set()
    for t in order:
        if w[t] > 0.0 and (mass < top_p or not nucleus):
            nucleus.add(t)
            mass += w[t]
    w = [x if t in nucleus else 0.0 for t, x in enumerate(w)]
    return [x / sum(w) for x in w]


def exact_distribution(max_len: int, **kw) -> dict[tuple[int, ...], float]:
    """Probability of every output (tokens before EOS) of at most `max_len` tokens."""
    dist = {}
    for n in range(max_len + 1):
        for seq in itertools.product(REAL, repeat=n):
            p, prev = 1.0, BOS_ID
            for i, tok in enumerate([*seq, EOS_ID]):
                p *= reference_step(TABLE[prev].tolist(), force_eos=i == max_len, **kw)[tok]
                prev = tok
            dist[seq] = p
    assert sum(dist.values()) == pytest.approx(1.0)
    return dist


def within_bounds(counts: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float], n: int) -> bool:
    """Every outcome's count within 5 standard deviations (+1) of n * p; nothing outside the support."""
    if set(counts) - set(expected):
        return False
    return all(abs(counts.get(seq, 0) - n * p) <= 5.0 * math.sqrt(n * p * (1 - p)) + 1.0 for seq, p in expected.items())


SETTINGS = [
    {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
    {"temperature": 2.0, "top_k": 0, "top_p": 1.0},
    {"temperature": 0.7, "top_k": 2, "top_p": 1.0},
    {"temperature": 1.0, "top_k": 0, "top_p": 0.75},
    {"temperature": 1.5, "top_k": 3, "top_p": 0.8},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_empirical_distribution_matches_model(settings):
    model, n = MarkovModel(TABLE), 20000
    src, mask = make_batch([[4, 5]])  # max length floor(1.0 * 2 + 0) = 2 tokens
    hyps = sample(model, src, mask, n=n, a=1.0, b=0, seed=11, **settings)[0]
    counts: dict[tuple[int, ...], int] = {}
    for h in hyps:
        counts[tuple(h.tokens)] = counts.get(tuple(h.tokens), 0) + 1
    expected = exact_distribution(2, **settings)
    assert within_bounds(counts, expected, n)
    # The bound has power: the same draws are rejected against a colder or hotter model.
    other = dict(settings, temperature=settings["temperature"] * 1.3)
    assert not within_bounds(counts, exact_distribution(2, **other), n)
    # Each sample's log_prob is the model's own (unfiltered) probability of it, EOS included.
    for h in hyps[:50]:
        p, prev = 1.0, BOS_ID
        for tok in [*h.tokens, EOS_ID]:
            p *= float(TABLE[prev, tok])
            prev = tok
        assert h.log_prob == pytest.approx(math.log(p), abs=1e-5)


def test_top_p_never_leaves_the_nucleus():
    # Checked against full teacher-forced re-decoding of every sampled prefix with TinyRNN.
    model = TinyRNN(14, seed=6, eos_bias=0.5)
    src, mask = make_batch(SOURCES)
    top_p = 0.6
    found = sample(model, src, mask, n=12, top_p=top_p, temperature=1.3, seed=4, a=1.0, b=3)
    max_lens = max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=1.0, max_len_b=3)).tolist()
    outside_big_nucleus = 0
    for i, hyps in enumerate(found):
        s, m = src[i : i + 1], mask[i : i + 1]
        for h in hyps:
            seq = [*h.tokens, EOS_ID]
            logits = model.forward(s, m, torch.tensor([[BOS_ID, *h.tokens]]))[0]  # (T, V)
            for t, tok in enumerate(seq):
                lp = torch.log_softmax(logits[t], dim=-1).unsqueeze(0)
                lp = mask_log_probs(lp, forbid_unk=True, force_eos=torch.tensor([t >= max_lens[i]]))[0]
                probs = reference_step(lp.exp().tolist(), temperature=1.3, top_k=0, top_p=top_p, force_eos=False)
                assert probs[tok] > 0.0, f"sentence {i}: token {tok} at step {t} is outside the nucleus"
                big = reference_step(lp.exp().tolist(), temperature=1.3, top_k=0, top_p=0.95, force_eos=False)
                outside_big_nucleus += big[tok] == 0.0
    assert outside_big_nucleus == 0
    assert len({tuple(h.tokens) for hyps in found for h in hyps}) > len(SOURCES)  # genuinely random


# ---------------------------------------------------------------- reproducibility and contracts


def test_same_seed_same_samples_other_seed_other_samples_any_batching():
    model = TinyRNN(12, seed=4, eos_bias=0.3)
    src, mask = make_batch(SOURCES)
    ids = [10, 11, 12, 13, 14]
    first = sample(model, src, mask, n=4, seed=1, ids=ids)
    assert sample(model, src, mask, n=4, seed=1, ids=ids) == first
    assert sample(model, src, mask, n=4, seed=2, ids=ids) != first
    for i, seq in enumerate(SOURCES):  # alone, or in another batch in reverse order: the same samples
        s, m = make_batch([seq])
        alone = sample(model, s, m, n=4, seed=1, ids=[ids[i]])[0]
        assert [h.tokens for h in alone] == [h.tokens for h in first[i]]
        assert [h.log_prob for h in alone] == pytest.approx([h.log_prob for h in first[i]], abs=1e-5)
    rev_src, rev_mask = make_batch(SOURCES[::-1])
    reversed_batch = sample(model, rev_src, rev_mask, n=4, seed=1, ids=ids[::-1])[::-1]
    assert [[h.tokens for h in hyps] for hyps in reversed_batch] == [[h.tokens for h in hyps] for hyps in first]


def test_each_sentence_is_handed_over_when_its_last_sample_ends():
    model = TinyRNN(12, seed=4, eos_bias=0.3)
    src, mask = make_batch(SOURCES)
    events: list[tuple[int, list, int]] = []  # (sentence, samples, decoder steps run by then)
    drawn = sample_search(model, src, mask,
                          SearchSettings(n_best=3, alpha=0.6, length_penalty="gnmt", max_len_a=1.5,
                                         max_len_b=3, forbid_unk=True, sampling=Sampling(temperature=1.0,
                                                                                         top_k=0, top_p=1.0,
                                                                                         seed=1)), on_done=lambda b, hyps: events.append((b, hyps, len(model.rows_per_step))))
    assert sorted(b for b, _, _ in events) == list(range(len(SOURCES)))
    for b, hyps, steps in events:
        assert hyps == drawn[b]
        assert steps == 1 + max(len(h.tokens) for h in hyps)  # right after its longest sample's EOS
    assert drawn == sample(model, src, mask, n=3, seed=1)  # the same samples without the hook


@pytest.mark.parametrize("kind,alpha", [("gnmt", 0.6), ("average", 1.0), ("none", 0.0)])
def test_sample_scores_equal_forced_decoding(kind, alpha):
    model = TinyRNN(12, seed=5, eos_bias=0.5)
    src, mask = make_batch(SOURCES)
    found = sample(model, src, mask, n=5, seed=3, alpha=alpha, kind=kind, temperature=1.2, top_k=6)
    for i, hyps in enumerate(found):
        assert len(hyps) == 5
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        forced = force_decode_score(model, src[i : i + 1].expand(5, -1), mask[i : i + 1].expand(5, -1),
                                    [h.tokens for h in hyps])
        assert [h.log_prob for h in hyps] == pytest.approx(forced.tolist(), abs=1e-5)
        expected = [lp / length_penalty(len(h.tokens) + 1, alpha=alpha, kind=kind) for lp, h in zip(forced.tolist(), hyps)]
        assert scores == pytest.approx(expected, abs=1e-5)


def test_max_length_special_tokens_and_argument_checks():
    model = TinyRNN(12, seed=3, unk_bias=4.0, eos_bias=-30.0)  # loves UNK, never ends freely
    src, mask = make_batch(SOURCES)
    limits = max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=1.0, max_len_b=1)).tolist()
    found = sample(model, src, mask, n=3, a=1.0, b=1, temperature=2.0)
    assert [[len(h.tokens) for h in hyps] for hyps in found] == [[n] * 3 for n in limits]
    assert not any({PAD_ID, BOS_ID, EOS_ID, UNK_ID} & set(h.tokens) for hyps in found for h in hyps)
    free = sample(model, src, mask, n=3, a=1.0, b=1, forbid_unk=False)
    assert any(UNK_ID in h.tokens for hyps in free for h in hyps)
    assert sample(model, src[:0], mask[:0]) == []
    for bad in ({"n": 0}, {"temperature": 0.0}, {"top_k": -2}, {"top_p": 1.01}, {"kind": "wu"}, {"ids": [1, 2]}):
        with pytest.raises(ValueError):
            sample(model, src, mask, **bad)


# ---------------------------------------------------------------- the real Transformer


def test_transformer_cold_sampling_equals_greedy_and_batch_invariance():
    from mt.config import ModelConfig
    from mt.data.batching import collate_source
    from mt.model.transformer import Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0)
    model = Transformer(cfg, 24, 24, joint_vocab=True).eval()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(4, 24, (n,), generator=g).tolist() for n in (5, 1, 8, 3)]
    src, mask = collate_source(seqs)
    with torch.inference_mode():
        greedy = greedy_search(model, src, mask, SearchSettings(max_len_a=1.0, max_len_b=4, forbid_unk=True))
        cold = sample(model, src, mask, n=2, temperature=1e-6, a=1.0, b=4)
        assert [[h.tokens for h in hyps] for hyps in cold] == [[g_] * 2 for g_ in greedy]
        batched = sample(model, src, mask, n=3, top_p=0.9, seed=5, a=1.0, b=4)
        for i, seq in enumerate(seqs):
            s, m = collate_source([seq])
            alone = sample(model, s, m, n=3, top_p=0.9, seed=5, a=1.0, b=4, ids=[i])[0]
            assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
