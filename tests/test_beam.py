"""mt.decode.beam.BeamState: each step of a beam search on small hand-built tensors.

The whole search (beam 1 == greedy, batch independence, n-best, forced-decoding scores, the
CTranslate2 parity) is tested in test_search.py, test_forced.py, test_translate.py, test_export.py;
here each named piece is checked on its own against values worked out by hand.
"""

from __future__ import annotations

import math

import torch

from mt.data.tokenizer import BOS_ID, EOS_ID
from mt.decode.beam import BeamState, Candidates
from mt.decode.search import Hypothesis

NEG_INF = float("-inf")


def state(*, k: int, scores: list[list[float]], history: list[list[int]], sent: list[int], step: int,
          max_lens: list[int], kind: str = "none", alpha: float = 1.0) -> BeamState:
    """A BeamState in the middle of a search: N = len(scores) sentences, K = k rows each."""
    n = len(scores)
    ml = torch.tensor(max_lens)
    return BeamState(k=k, alpha=alpha, kind=kind, sent=torch.tensor(sent), scores=torch.tensor(scores),
                     history=torch.tensor(history, dtype=torch.long).view(n * k, -1),
                     parents=torch.zeros((n, k), dtype=torch.long),
                     memory=torch.arange(n * k, dtype=torch.float32).view(n * k, 1, 1).expand(n * k, 2, 3).clone(),
                     src_mask=torch.ones((n * k, 2), dtype=torch.bool), max_lens=ml,
                     final_lp=torch.ones(n) if kind == "none" else (ml.float() + 1.0) ** alpha,
                     num_finished=torch.zeros(n, dtype=torch.long), nth_best=torch.full((n,), NEG_INF), step=step)


def test_start_holds_one_live_hypothesis_per_sentence_and_repeats_memory_per_row() -> None:
    memory = torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]])  # (B=2, S=2, D=1)
    src_mask = torch.tensor([[True, True], [True, False]])
    s = BeamState.start(memory, src_mask, torch.tensor([4, 2]), k=3, alpha=1.0, kind="average")
    assert s.scores.tolist() == [[0.0, NEG_INF, NEG_INF]] * 2  # no duplicates in the first expansion
    assert s.memory[:, 0, 0].tolist() == [1.0, 1.0, 1.0, 3.0, 3.0, 3.0]  # sentence-major rows
    assert s.src_mask.tolist() == [[True, True]] * 3 + [[True, False]] * 3
    assert s.history.shape == (6, 0) and s.last_tokens.view(-1).tolist() == [BOS_ID] * 6
    assert s.final_lp.tolist() == [5.0, 3.0]  # average, alpha 1: |y| at the longest output, EOS counted
    assert s.sent.tolist() == [0, 1] and s.live and s.step == 0
    assert s.at_max_length().tolist() == [False] * 6


def test_at_max_length_forces_eos_per_row_of_sentences_at_their_limit() -> None:
    s = state(k=2, scores=[[0.0, -1.0], [0.0, -1.0]], history=[[5], [6], [7], [8]], sent=[0, 1], step=2,
              max_lens=[2, 3])
    assert s.at_max_length().tolist() == [True, True, False, False]
    assert s.last_tokens.view(-1).tolist() == [5, 6, 7, 8]


def test_finish_collects_eos_among_the_k_best_with_penalised_scores() -> None:
    # Two live sentences (originally 3 and 0), K = 2, step 2: a finished hypothesis has |y| = 3.
    s = state(k=2, scores=[[-1.0, -2.0], [-0.5, -0.7]], history=[[5, 6], [7, 8], [9, 10], [11, 12]],
              sent=[3, 0], step=2, max_lens=[9, 9], kind="average", alpha=1.0)
    cand = Candidates(
        values=torch.tensor([[-1.5, -1.75, -2.25, -2.5], [-0.625, NEG_INF, -0.875, -1.0]]),
        beams=torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]]),
        tokens=torch.tensor([[EOS_ID, 4, EOS_ID, 7], [13, EOS_ID, 14, 15]]),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(4)]
    s.finish(cand, finished, n_best=1)
    # Sentence 3: EOS at rank 0 from row 1 (history [7, 8]); the EOS at rank 2 is outside the K best.
    # Sentence 0: its EOS has -inf (no hypothesis there), so nothing finishes.
    assert finished[3] == [Hypothesis([7, 8], -1.5 / 3.0, -1.5)]
    assert finished[0] == [] and finished[1] == finished[2] == []
    assert s.num_finished.tolist() == [1, 0]
    assert s.nth_best.tolist() == [-0.5, NEG_INF]  # n_best = 1 reached for sentence 3 only


def test_finish_keeps_the_n_best_th_score_over_steps() -> None:
    s = state(k=2, scores=[[-1.0, -2.0]], history=[[5], [6]], sent=[0], step=1, max_lens=[9])
    finished: list[list[Hypothesis]] = [[Hypothesis([9], -0.5, -0.5)]]
    cand = Candidates(values=torch.tensor([[-0.75, -3.0, -4.0, -5.0]]), beams=torch.tensor([[0, 1, 0, 1]]),
                      tokens=torch.tensor([[EOS_ID, 8, 9, 10]]))
    s.finish(cand, finished, n_best=2)
    assert [h.score for h in finished[0]] == [-0.5, -0.75]  # kind none: score == log-prob
    assert s.num_finished.tolist() == [2] and s.nth_best.tolist() == [-0.75]


def test_advance_keeps_the_k_best_that_do_not_end_in_score_order() -> None:
    s = state(k=2, scores=[[-0.1, -0.2], [-0.3, -0.4]], history=[[5], [6], [7], [8]], sent=[0, 1], step=1,
              max_lens=[9, 9])
    cand = Candidates(
        values=torch.tensor([[-0.5, -0.625, -0.75, -0.875], [-1.0, -1.125, -1.25, -1.375]]),
        beams=torch.tensor([[0, 1, 0, 1], [1, 1, 0, 0]]),
        tokens=torch.tensor([[EOS_ID, 11, 12, 13], [14, EOS_ID, 15, EOS_ID]]),
    )
    s.advance(cand)
    assert s.scores.tolist() == [[-0.625, -0.75], [-1.0, -1.25]]
    assert s.parents.tolist() == [[1, 0], [3, 2]]  # old rows: sentence 1's rows are 2 and 3
    assert s.history.tolist() == [[6, 11], [5, 12], [8, 14], [7, 15]]
    assert s.last_tokens.view(-1).tolist() == [11, 12, 14, 15] and s.step == 2


def test_done_by_count_by_length_and_by_the_exact_bound() -> None:
    # kind none: the bound is the best live log-prob itself.
    s = state(k=2, scores=[[-1.0, -2.0]] * 4, history=[[5]] * 8, sent=[0, 1, 2, 3], step=3, max_lens=[9, 2, 9, 9])
    s.num_finished = torch.tensor([2, 0, 1, 1])
    s.nth_best = torch.tensor([NEG_INF, NEG_INF, -0.9, -1.1])
    # 0: K finished; 1: past its maximum length; 2: a finished -0.9 beats any live (<= -1.0); 3: live -1.0 may win.
    assert s.done().tolist() == [True, True, True, False]


def test_done_bound_takes_the_largest_penalty_still_reachable() -> None:
    # average, alpha 1: a live log-prob -6 divided by |y| can reach -6 / 10 = -0.6 at max length 9
    # (|y| = 10): a finished -0.625 can still be beaten, a finished -0.5625 cannot.
    s = state(k=2, scores=[[-6.0, -7.0], [-6.0, -7.0]], history=[[5]] * 4, sent=[0, 1], step=2, max_lens=[9, 9],
              kind="average", alpha=1.0)
    s.num_finished = torch.tensor([1, 1])  # n_best = 1 reached, fewer than K = 2 finished
    s.nth_best = torch.tensor([-0.625, -0.5625])
    assert s.done().tolist() == [False, True]
    assert math.isclose(float(s.final_lp[0]), 10.0)


def test_select_keeps_chosen_sentences_in_every_tensor_in_order() -> None:
    s = state(k=2, scores=[[-1.0, -1.5], [-2.0, -2.5], [-3.0, -3.5]], history=[[1], [2], [3], [4], [5], [6]],
              sent=[7, 8, 9], step=1, max_lens=[4, 5, 6])
    s.parents = torch.tensor([[1, 0], [2, 3], [5, 4]])
    s.num_finished = torch.tensor([0, 1, 2])
    s.nth_best = torch.tensor([-9.0, -8.0, -7.0])
    s.final_lp = torch.tensor([1.0, 2.0, 3.0])
    s.select(torch.tensor([2, 0]))
    assert s.sent.tolist() == [9, 7]
    assert s.scores.tolist() == [[-3.0, -3.5], [-1.0, -1.5]]
    assert s.parents.tolist() == [[5, 4], [1, 0]]  # row numbers from before the step: the cache's
    assert s.history.view(-1).tolist() == [5, 6, 1, 2]
    assert s.memory[:, 0, 0].tolist() == [4.0, 5.0, 0.0, 1.0] and s.src_mask.shape == (4, 2)
    assert s.max_lens.tolist() == [6, 4] and s.final_lp.tolist() == [3.0, 1.0]
    assert s.num_finished.tolist() == [2, 0] and s.nth_best.tolist() == [-7.0, -9.0]
    s.select(torch.tensor([], dtype=torch.long))
    assert not s.live and s.memory.shape[0] == 0
