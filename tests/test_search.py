"""Greedy and beam search: golden pieces, exhaustive optimality, invariants.

Most tests use `TinyRNN`, a hand-made seeded model implementing the search interface
(encode / decode_step / cache.reorder / forward) whose next-token distribution depends on the
source and on the whole prefix, so caching and reordering mistakes change the output. The
real Transformer is checked for beam 1 == greedy and batch invariance.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode.beam import beam_search
from mt.decode.forced import force_decode_score
from mt.decode.rules import SearchSettings, apply_rules, max_output_lengths
from mt.decode.search import Hypothesis, greedy_search, length_penalty, topk_candidates

NEG_INF = float("-inf")


pytestmark = pytest.mark.usefixtures("one_thread")


class RNNCache:
    """The fake model's decoder state: one hidden vector per row."""

    def __init__(self, hidden: torch.Tensor) -> None:
        self.hidden = hidden  # (R, D)

    def reorder(self, index: torch.Tensor) -> RNNCache:
        return RNNCache(self.hidden.index_select(0, index))

    def reorder_beams(self, index: torch.Tensor) -> RNNCache:
        return self.reorder(index)  # no per-sentence state to share


class TinyRNN:
    """Seeded test double: memory = source embeddings; decoder = tanh RNN over the prefix plus the
    masked mean of the memory. Records the rows of every decode_step call."""

    def __init__(self, vocab: int, *, seed: int, dim: int = 8, eos_bias: float = 0.0, unk_bias: float = 0.0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn(vocab, dim, generator=g)
        self.w_in = torch.randn(dim, dim, generator=g) * 0.7
        self.w_h = torch.randn(dim, dim, generator=g) * 0.7
        self.out = torch.randn(dim, vocab, generator=g) * 1.5
        self.bias = torch.zeros(vocab)
        self.bias[EOS_ID] = eos_bias
        self.bias[UNK_ID] = unk_bias
        self.rows_per_step: list[int] = []

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.emb[src] * src_mask.unsqueeze(2)  # (B, S, D), padding zeroed

    def _step(self, tokens: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, hidden: torch.Tensor):
        ctx = memory.sum(1) / src_mask.sum(1, keepdim=True)  # (R, D) masked mean
        hidden = torch.tanh(self.emb[tokens] @ self.w_in + hidden @ self.w_h + ctx)
        return hidden @ self.out + self.bias, hidden  # logits (R, V)

    def decode_step(self, tokens, memory, src_mask, cache):
        assert tokens.shape == (memory.size(0), 1), "search must feed one token per row"
        self.rows_per_step.append(tokens.size(0))
        hidden = cache.hidden if cache is not None else torch.zeros(tokens.size(0), self.emb.size(1))
        logits, hidden = self._step(tokens[:, 0], memory, src_mask, hidden)
        return torch.log_softmax(logits, dim=-1), RNNCache(hidden)

    def forward(self, src, src_mask, tgt_in):
        memory = self.encode(src, src_mask)
        hidden = torch.zeros(src.size(0), self.emb.size(1))
        steps = []
        for t in range(tgt_in.size(1)):
            logits, hidden = self._step(tgt_in[:, t], memory, src_mask, hidden)
            steps.append(logits)
        return torch.stack(steps, dim=1)  # (B, T, V)


def make_batch(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (src, src_mask) with True = real token."""
    width = max(len(s) for s in seqs)
    src = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        src[i, : len(s)] = torch.tensor(s)
    return src, src != PAD_ID


SOURCES = [[4, 5, 6], [7], [8, 9, 4, 5, 6, 7], [5, 5], [9, 8, 7, 6]]


def mask_log_probs(log_probs: torch.Tensor, *, forbid_unk: bool, force_eos: torch.Tensor) -> torch.Tensor:
    """The rules of a step without a loop guard (`apply_rules`): banned tokens, EOS forced in `force_eos` rows."""
    def no_history() -> torch.Tensor:
        raise AssertionError("the guard is off: no rule reads the history")
    return apply_rules(log_probs, SearchSettings(forbid_unk=forbid_unk), at_max=force_eos, history=no_history)


def beam(model, src, mask, *, k, n_best=1, alpha=0.6, kind="gnmt", a=1.5, b=3, forbid_unk=True):
    return beam_search(model, src, mask, SearchSettings(beam=k, alpha=alpha, length_penalty=kind,
                                                        max_len_a=a, max_len_b=b, n_best=n_best,
                                                        forbid_unk=forbid_unk))


# ---------------------------------------------------------------- small pieces, golden values


def test_length_penalty_golden_values():
    assert length_penalty(1, alpha=0.6, kind="gnmt") == pytest.approx(1.0)
    assert length_penalty(7, alpha=1.0, kind="gnmt") == pytest.approx(2.0)
    assert length_penalty(13, alpha=0.5, kind="gnmt") == pytest.approx(math.sqrt(3.0))
    assert length_penalty(4, alpha=0.5, kind="average") == pytest.approx(2.0)
    assert length_penalty(9, alpha=0.0, kind="average") == pytest.approx(1.0)
    assert length_penalty(9, alpha=0.6, kind="none") == 1.0
    t = length_penalty(torch.tensor([1.0, 7.0]), alpha=1.0, kind="gnmt")
    assert torch.allclose(t, torch.tensor([1.0, 2.0]))
    assert torch.equal(length_penalty(torch.tensor([3.0, 5.0]), alpha=1.0, kind="none"), torch.ones(2))
    with pytest.raises(ValueError):
        length_penalty(3, alpha=1.0, kind="wu")


def test_max_output_lengths():
    _, mask = make_batch([[4, 4, 4], [4]])
    assert max_output_lengths(mask.sum(dim=1),
                              SearchSettings(max_len_a=1.5, max_len_b=2)).tolist() == [6,
                                                                                       3]  # floor(6.5), floor(3.5)
    assert max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=0.0, max_len_b=0)).tolist() == [0, 0]


def test_topk_candidates_by_hand():
    scores = torch.tensor([[0.0, -1.0]])  # one sentence, two live hypotheses
    log_probs = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]]))
    values, beams, toks = topk_candidates(scores, log_probs, 3)
    # candidates: b0: log .5 = -0.693, log .3 = -1.204, log .2 = -1.609; b1: -1 + log .9 = -1.105
    assert beams.tolist() == [[0, 1, 0]]
    assert toks.tolist() == [[0, 0, 1]]
    assert torch.allclose(values, torch.tensor([[math.log(0.5), -1 + math.log(0.9), math.log(0.3)]]))
    values, beams, toks = topk_candidates(torch.tensor([[0.0, -0.1]]), log_probs, 2)
    assert beams.tolist() == [[1, 0]] and toks.tolist() == [[0, 0]]


def test_the_step_rules_ban_specials_and_force_eos():
    lp = torch.zeros(2, 6)
    out = mask_log_probs(lp, forbid_unk=True, force_eos=torch.tensor([False, True]))
    assert out[0].tolist() == [NEG_INF, NEG_INF, NEG_INF, 0.0, 0.0, 0.0]
    assert out[1].tolist() == [NEG_INF, NEG_INF, NEG_INF, 0.0, NEG_INF, NEG_INF]
    out = mask_log_probs(torch.zeros(1, 6), forbid_unk=False, force_eos=torch.tensor([False]))
    assert out[0, UNK_ID] == 0.0 and out[0, PAD_ID] == NEG_INF and out[0, BOS_ID] == NEG_INF


# ---------------------------------------------------------------- search on the fake model


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_beam1_equals_greedy_fake(seed):
    model = TinyRNN(12, seed=seed, eos_bias=1.0)
    src, mask = make_batch(SOURCES)
    greedy = greedy_search(model, src, mask, SearchSettings(max_len_a=1.5, max_len_b=3, forbid_unk=True))
    hyps = beam(model, src, mask, k=1)
    assert [h[0].tokens for h in hyps] == greedy
    limits = max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=1.5, max_len_b=3)).tolist()
    assert any(0 < len(g) < n for g, n in zip(greedy, limits))  # some sentence ends freely


def enumerate_best(model, src_row, mask_row, *, max_len, alpha, kind, tokens=(4, 5)):
    """Every sequence over `tokens` up to `max_len` tokens (+EOS), scored by forced decoding."""
    seqs = [list(s) for n in range(max_len + 1) for s in itertools.product(tokens, repeat=n)]
    src = src_row.expand(len(seqs), -1)
    mask = mask_row.expand(len(seqs), -1)
    log_probs = force_decode_score(model, src, mask, seqs).tolist()
    scored = [(lp / length_penalty(len(s) + 1, alpha=alpha, kind=kind), s) for lp, s in zip(log_probs, seqs)]
    return sorted(scored, key=lambda x: -x[0])


@pytest.mark.parametrize("kind,alpha", [("gnmt", 0.6), ("gnmt", 2.0), ("average", 1.0), ("none", 0.0)])
def test_large_beam_finds_exhaustive_best(kind, alpha):
    # vocab 6: PAD UNK BOS EOS + two real tokens; 31 sequences of <= 4 tokens fit in a beam of 32,
    # so the beam's 31-best list must be the whole enumeration in order.
    model = TinyRNN(6, seed=7, eos_bias=-0.5)
    src, mask = make_batch([[4, 5, 4], [5], [5, 4]])
    hyps = beam(model, src, mask, k=32, n_best=31, alpha=alpha, kind=kind, a=0.0, b=4)
    for i in range(src.size(0)):
        expected = enumerate_best(model, src[i : i + 1], mask[i : i + 1], max_len=4, alpha=alpha, kind=kind)
        assert [h.tokens for h in hyps[i]] == [s for _, s in expected]
        assert [h.score for h in hyps[i]] == pytest.approx([sc for sc, _ in expected], abs=1e-5)
    best_lengths = {len(h[0].tokens) for h in hyps}
    assert len(best_lengths) > 1 or kind == "none"  # the penalty matters in at least one case


def reference_beam(model, src_row, mask_row, *, k, alpha, kind, max_len, n_best):
    """Plain per-sentence beam search with the same rules, re-decoding each prefix in full and
    running until k hypotheses finished (no early-stop bound, no batching, no cache)."""
    live: list[tuple[float, list[int]]] = [(0.0, [])]
    finished: list[tuple[float, float, list[int]]] = []
    for step in range(max_len + 1):
        cands = []
        for cum, toks in live:
            tgt_in = torch.tensor([[BOS_ID, *toks]])
            lp = torch.log_softmax(model.forward(src_row, mask_row, tgt_in)[0, -1], dim=-1)
            lp = mask_log_probs(lp.unsqueeze(0), forbid_unk=True, force_eos=torch.tensor([step >= max_len]))[0]
            cands += [(cum + float(lp[v]), toks, v) for v in range(lp.numel()) if math.isfinite(float(lp[v]))]
        cands.sort(key=lambda c: -c[0])
        for cum, toks, v in cands[:k]:
            if v == EOS_ID:
                finished.append((cum / length_penalty(len(toks) + 1, alpha=alpha, kind=kind), cum, toks))
        live = [(cum, toks + [v]) for cum, toks, v in cands[: 2 * k] if v != EOS_ID][:k]
        if len(finished) >= k:
            break
    return sorted(finished, key=lambda f: -f[0])[:n_best]


@pytest.mark.parametrize("seed,k,kind,alpha", [(0, 3, "gnmt", 0.6), (1, 4, "average", 1.0), (2, 2, "none", 0.0),
                                               (3, 5, "gnmt", 1.5)])
def test_beam_matches_plain_reference(seed, k, kind, alpha):
    model = TinyRNN(10, seed=seed, eos_bias=0.3)
    src, mask = make_batch(SOURCES)
    hyps = beam(model, src, mask, k=k, n_best=k, alpha=alpha, kind=kind, a=1.0, b=2)
    max_lens = max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=1.0, max_len_b=2)).tolist()
    for i in range(src.size(0)):
        ref = reference_beam(model, src[i : i + 1, : int(mask[i].sum())], mask[i : i + 1, : int(mask[i].sum())],
                             k=k, alpha=alpha, kind=kind, max_len=max_lens[i], n_best=k)
        assert [h.tokens for h in hyps[i]] == [r[2] for r in ref]
        assert [h.score for h in hyps[i]] == pytest.approx([r[0] for r in ref], abs=1e-5)


@pytest.mark.parametrize("kind,alpha", [("gnmt", 0.6), ("average", 1.0), ("none", 0.0)])
def test_nbest_sorted_and_equal_to_forced_scores(kind, alpha):
    model = TinyRNN(12, seed=5, eos_bias=0.5)
    src, mask = make_batch(SOURCES)
    hyps = beam(model, src, mask, k=6, n_best=6, alpha=alpha, kind=kind)
    for i, nbest in enumerate(hyps):
        assert len(nbest) == 6
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        forced = force_decode_score(model, src[i : i + 1].expand(6, -1), mask[i : i + 1].expand(6, -1),
                                    [h.tokens for h in nbest])
        assert [h.log_prob for h in nbest] == pytest.approx(forced.tolist(), abs=1e-5)
        expected = [lp / length_penalty(len(h.tokens) + 1, alpha=alpha, kind=kind) for lp, h in zip(forced.tolist(), nbest)]
        assert scores == pytest.approx(expected, abs=1e-5)
        assert len({tuple(h.tokens) for h in nbest}) == 6  # no duplicate hypotheses


def test_finished_hypotheses_keep_their_score_while_others_run_on():
    # Sentence 0 ends almost at once, sentence 1 (long max length, EOS unlikely) keeps the batch
    # running; the early hypotheses' scores must be exactly their forced log-probs (nothing added).
    model = TinyRNN(10, seed=11)
    model.bias[EOS_ID] = 0.0
    src, mask = make_batch([[4], [5, 6, 7, 8, 9, 4, 5, 6]])
    hyps = beam(model, src, mask, k=4, n_best=4, a=3.0, b=0, kind="none", alpha=0.0)
    for i in range(2):
        forced = force_decode_score(model, src[i : i + 1].expand(4, -1), mask[i : i + 1].expand(4, -1),
                                    [h.tokens for h in hyps[i]])
        assert [h.log_prob for h in hyps[i]] == pytest.approx(forced.tolist(), abs=1e-5)
        assert all(h.score == h.log_prob for h in hyps[i])


def test_translation_independent_of_batch():
    model = TinyRNN(12, seed=4, eos_bias=0.3)
    src, mask = make_batch(SOURCES)
    batched_greedy = greedy_search(model, src, mask,
                                   SearchSettings(max_len_a=1.5, max_len_b=3, forbid_unk=True))
    batched_beam = beam(model, src, mask, k=4, n_best=2)
    for i, seq in enumerate(SOURCES):
        s, m = make_batch([seq])  # alone: no padding
        assert greedy_search(model, s, m, SearchSettings(max_len_a=1.5, max_len_b=3,
                                                         forbid_unk=True))[0] == batched_greedy[i]
        alone = beam(model, s, m, k=4, n_best=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched_beam[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched_beam[i]], abs=1e-5)


def test_max_length_respected_and_reached():
    model = TinyRNN(12, seed=2, eos_bias=-30.0)  # EOS never chosen freely: runs to the limit
    src, mask = make_batch(SOURCES)
    limits = max_output_lengths(mask.sum(dim=1), SearchSettings(max_len_a=1.5, max_len_b=1)).tolist()
    greedy = greedy_search(model, src, mask, SearchSettings(max_len_a=1.5, max_len_b=1, forbid_unk=True))
    assert [len(g) for g in greedy] == limits
    hyps = beam(model, src, mask, k=3, n_best=3, a=1.5, b=1)
    assert [[len(h.tokens) for h in nb] for nb in hyps] == [[n] * 3 for n in limits]


def test_forbid_unk_and_special_tokens():
    model = TinyRNN(12, seed=3, unk_bias=8.0)
    src, mask = make_batch(SOURCES)
    free = greedy_search(model, src, mask, SearchSettings(max_len_a=1.0, max_len_b=2, forbid_unk=False))
    assert any(UNK_ID in g for g in free)  # the model loves <unk> ...
    for forbid_unk in (True, False):
        greedy = greedy_search(model, src, mask,
                               SearchSettings(max_len_a=1.0, max_len_b=2, forbid_unk=forbid_unk))
        hyps = beam(model, src, mask, k=3, n_best=3, a=1.0, b=2, forbid_unk=forbid_unk)
        outputs = greedy + [h.tokens for nb in hyps for h in nb]
        banned = {PAD_ID, BOS_ID, EOS_ID} | ({UNK_ID} if forbid_unk else set())
        assert not any(banned & set(o) for o in outputs)  # ... but never gets it when forbidden


def test_stops_early_and_drops_finished_rows():
    model = TinyRNN(12, seed=0, eos_bias=30.0)  # EOS first, always
    src, mask = make_batch(SOURCES)
    assert greedy_search(model, src, mask,
                         SearchSettings(max_len_a=2.0, max_len_b=10, forbid_unk=True)) == [[]] * 5
    assert model.rows_per_step == [5]
    model.rows_per_step.clear()
    hyps = beam(model, src, mask, k=4, a=2.0, b=10)
    assert [nb[0].tokens for nb in hyps] == [[]] * 5
    assert model.rows_per_step == [20]  # nothing can beat an EOS at ~0 log-prob: one step
    # Rows of finished sentences leave the batch: with short and long limits the row count falls.
    model = TinyRNN(12, seed=0, eos_bias=-30.0)
    src, mask = make_batch([[4], [4, 5, 6, 7]])
    greedy_search(model, src, mask, SearchSettings(max_len_a=1.0, max_len_b=0, forbid_unk=True))
    assert model.rows_per_step == [2, 2, 1, 1, 1]
    model.rows_per_step.clear()
    beam(model, src, mask, k=3, a=1.0, b=0)
    assert model.rows_per_step == [6, 6, 3, 3, 3]


def test_sentences_are_handed_over_as_they_end():
    """`on_done` gives each sentence its final result once, as soon as it ends: greedy right after
    the step that emitted its EOS, beam search when it stops, before the steps longer ones need."""
    model = TinyRNN(12, seed=4, eos_bias=0.3)
    src, mask = make_batch(SOURCES)
    events: list[tuple[int, object, int]] = []  # (sentence, result, decoder steps run by then)

    def record(b: int, result: object) -> None:
        events.append((b, result, len(model.rows_per_step)))

    greedy = greedy_search(model, src, mask,
                           SearchSettings(max_len_a=1.5, max_len_b=3, forbid_unk=True), on_done=record)
    assert len({len(g) for g in greedy}) > 1  # sentences end at different steps
    assert sorted(b for b, _, _ in events) == list(range(len(SOURCES)))
    assert all(tokens == greedy[b] and steps == len(tokens) + 1 for b, tokens, steps in events)

    events.clear()
    model.rows_per_step.clear()
    hyps = beam_search(model, src, mask, SearchSettings(beam=3, alpha=0.6, length_penalty="gnmt",
                                                        max_len_a=1.5, max_len_b=3, n_best=2,
                                                        forbid_unk=True), on_done=record)
    assert sorted(b for b, _, _ in events) == list(range(len(SOURCES)))
    assert all(result == hyps[b] for b, result, _ in events)
    assert min(steps for _, _, steps in events) < len(model.rows_per_step)  # some before the last step


def test_beam_argument_checks():
    model = TinyRNN(6, seed=0)
    src, mask = make_batch([[4]])
    with pytest.raises(ValueError):
        beam(model, src, mask, k=2, n_best=3)
    with pytest.raises(ValueError):
        beam(model, src, mask, k=2, kind="wu")
    assert beam(model, src[:0], mask[:0], k=2) == []
    assert greedy_search(model, src[:0], mask[:0],
                         SearchSettings(max_len_a=1.0, max_len_b=1, forbid_unk=True)) == []
    assert isinstance(beam(model, src, mask, k=2)[0][0], Hypothesis)


# ---------------------------------------------------------------- the real Transformer


@pytest.fixture(scope="module")
def transformer():
    from mt.config import ModelConfig
    from mt.model.transformer import Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0)
    return Transformer(cfg, 24, 24, joint_vocab=True).eval()


def real_batch(lengths: list[int], seed: int = 0) -> tuple[list[list[int]], torch.Tensor, torch.Tensor]:
    from mt.data.batching import collate_source

    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(4, 24, (n,), generator=g).tolist() for n in lengths]
    src, mask = collate_source(seqs)
    return seqs, src, mask


def test_transformer_beam1_equals_greedy(transformer):
    _, src, mask = real_batch([5, 1, 9, 3, 7, 0])
    with torch.inference_mode():
        greedy = greedy_search(transformer, src, mask,
                               SearchSettings(max_len_a=1.0, max_len_b=4, forbid_unk=True))
        hyps = beam(transformer, src, mask, k=1, a=1.0, b=4)
    assert [h[0].tokens for h in hyps] == greedy


def test_transformer_batch_invariance_and_forced_scores(transformer):
    from mt.data.batching import collate_source

    seqs, src, mask = real_batch([6, 2, 9, 4])
    with torch.inference_mode():
        batched_greedy = greedy_search(transformer, src, mask,
                                       SearchSettings(max_len_a=1.0, max_len_b=3, forbid_unk=True))
        batched = beam(transformer, src, mask, k=3, n_best=3, a=1.0, b=3)
        for i, seq in enumerate(seqs):
            s, m = collate_source([seq])
            assert greedy_search(transformer, s, m,
                                 SearchSettings(max_len_a=1.0, max_len_b=3,
                                                forbid_unk=True))[0] == batched_greedy[i]
            alone = beam(transformer, s, m, k=3, n_best=3, a=1.0, b=3)[0]
            assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
            assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)
            # incremental (cached) search scores == full teacher-forced decoding of the hypotheses
            forced = force_decode_score(transformer, s.expand(3, -1), m.expand(3, -1), [h.tokens for h in alone])
            assert [h.log_prob for h in alone] == pytest.approx(forced.tolist(), abs=1e-4)
