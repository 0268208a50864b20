"""mt.decode.beam.BeamState: each step of a beam search on small hand-built tensors.

The whole search (beam 1 == greedy, batch independence, n-best, forced-decoding scores, the
CTranslate2 parity) is tested in test_search.py, test_forced.py, test_translate.py, test_export.py;
here each named piece is checked on its own against values worked out by hand.
"""

from __future__ import annotations

import math

import torch
from test_search import mask_log_probs

from mt.data.tokenizer import BOS_ID, EOS_ID, UNK_ID
from mt.decode.beam import BeamState, Candidates
from mt.decode.rules import SearchSettings
from mt.decode.search import Hypothesis

NEG_INF = float("-inf")


def state(*, k: int, scores: list[list[float]], history: list[list[int]], sent: list[int], step: int,
          max_lens: list[int], kind: str = "none", alpha: float = 1.0) -> BeamState:
    """A BeamState in the middle of a search: N = len(scores) sentences, K = k rows each."""
    n = len(scores)
    ml = torch.tensor(max_lens)
    settings = SearchSettings(beam=k, alpha=alpha, length_penalty=kind)
    return BeamState(settings=settings, sent=torch.tensor(sent), scores=torch.tensor(scores),
                     history=torch.tensor(history, dtype=torch.long).view(n * k, -1),
                     parents=torch.zeros((n, k), dtype=torch.long),
                     memory=torch.arange(n * k, dtype=torch.float32).view(n * k, 1, 1).expand(n * k, 2, 3).clone(),
                     src_mask=torch.ones((n * k, 2), dtype=torch.bool), max_lens=ml,
                     final_lp=torch.ones(n) if kind == "none" else (ml.float() + 1.0) ** alpha,
                     num_finished=torch.zeros(n, dtype=torch.long), nth_best=torch.full((n,), NEG_INF), step=step)


def test_start_holds_one_live_hypothesis_per_sentence_and_repeats_memory_per_row() -> None:
    memory = torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]])  # (B=2, S=2, D=1)
    src_mask = torch.tensor([[True, True], [True, False]])
    s = BeamState.start(memory, src_mask, torch.tensor([4, 2]),
                        SearchSettings(beam=3, alpha=1.0, length_penalty="average"))
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


class RowCache:
    """A decoder cache whose row i is the id `ids[i]`; records which reorder built it."""

    def __init__(self, ids: list[int], via: str = "") -> None:
        self.ids, self.via = ids, via

    def reorder(self, index: torch.Tensor) -> RowCache:
        return RowCache([self.ids[i] for i in index.tolist()], "reorder")

    def reorder_beams(self, index: torch.Tensor) -> RowCache:
        return RowCache([self.ids[i] for i in index.tolist()], "reorder_beams")


class RecordingModel:
    """decode_step records what it is fed and returns zero log-probs over V = 6 and the cache it got."""

    def __init__(self) -> None:
        self.fed: list[tuple[list[int], list[float], list[int] | None, str | None]] = []

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
                    cache: RowCache | None) -> tuple[torch.Tensor, RowCache]:
        self.fed.append((tokens.view(-1).tolist(), memory[:, 0, 0].tolist(),
                         None if cache is None else cache.ids, None if cache is None else cache.via))
        out = cache if cache is not None else RowCache(list(range(100, 100 + tokens.size(0))))
        return torch.zeros(tokens.size(0), 6, dtype=torch.float64), out


def test_decode_moves_the_cache_by_parents_in_one_reorder_and_select_drops_its_rows() -> None:
    s = state(k=2, scores=[[-1.0, -1.5], [-2.0, -2.5], [-3.0, -3.5]], history=[[1], [2], [3], [4], [5], [6]],
              sent=[7, 8, 9], step=1, max_lens=[4, 5, 6])
    model = RecordingModel()
    # The first step has no cache yet: the model starts one; its rows are the current rows.
    s.cache = None
    lp = s.decode(model)
    assert lp.dtype == torch.float32 and lp.shape == (6, 6)
    assert model.fed[-1] == ([1, 2, 3, 4, 5, 6], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], None, None)
    # New row r continues old row parents[r]; rows stay among their sentence's beams: reorder_beams.
    s.cache = RowCache([10, 11, 12, 13, 14, 15])
    s.parents = torch.tensor([[1, 0], [2, 3], [5, 4]])
    s.decode(model)
    assert model.fed[-1][2:] == ([11, 10, 12, 13, 15, 14], "reorder_beams")
    # Sentence 8 leaves (keep 9 then 7): the cache follows the kept parents in ONE full reorder,
    # in step with the tokens and memory rows fed alongside.
    s.cache = RowCache([10, 11, 12, 13, 14, 15])
    s.select(torch.tensor([2, 0]))
    s.decode(model)
    assert model.fed[-1] == ([5, 6, 1, 2], [4.0, 5.0, 0.0, 1.0], [15, 14, 11, 10], "reorder")
    # The next step is back to moving beams within sentences only.
    s.parents = torch.tensor([[1, 0], [2, 3]])
    s.decode(model)
    assert model.fed[-1][2:] == ([14, 15, 11, 10], "reorder_beams")


def test_topk_picks_the_2k_best_extensions_with_unk_forbidden() -> None:
    # K = 2, V = 6 (PAD 0, UNK 1, BOS 2, EOS 3, then tokens 4 and 5); live log-probs -1 and -2.
    s = state(k=2, scores=[[-1.0, -2.0]], history=[[4], [5]], sent=[0], step=1, max_lens=[9])
    log_probs = torch.tensor([[-0.125, -4.0, -0.125, -0.5, -0.25, -3.0],
                              [-0.125, -0.0625, -0.125, -1.0, -0.125, -0.375]])
    masked = mask_log_probs(log_probs.clone(), forbid_unk=True, force_eos=torch.tensor([False, False]))
    cand = s.topk(masked)
    # Sums: row 0: UNK -5, EOS -1.5, 4 -1.25, 5 -4; row 1: UNK -2.0625, EOS -3, 4 -2.125, 5 -2.375.
    # PAD, BOS and (here) UNK are banned, so the 2K = 4 best are:
    assert cand.values.tolist() == [[-1.25, -1.5, -2.125, -2.375]]
    assert cand.beams.tolist() == [[0, 0, 1, 1]]
    assert cand.tokens.tolist() == [[4, EOS_ID, 4, 5]]
    # With UNK allowed, row 1's UNK (-2 - 0.0625) takes third place.
    cand = s.topk(mask_log_probs(log_probs.clone(), forbid_unk=False, force_eos=torch.tensor([False, False])))
    assert cand.values.tolist() == [[-1.25, -1.5, -2.0625, -2.125]]
    assert cand.tokens.tolist() == [[4, EOS_ID, UNK_ID, 4]] and cand.beams.tolist() == [[0, 0, 1, 1]]
