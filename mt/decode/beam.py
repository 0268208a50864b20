"""Beam search as a loop over a small state with named steps (the conventions are mt.decode.search's).

`BeamState` holds the live hypotheses of the sentences still searching: K rows per sentence,
sentence-major, every per-sentence and per-row tensor in one object. One step of the search is

    log_probs = state.decode(model)              the cache follows the rows, then one decoder step
    apply_rules(log_probs, settings, ...)        every rule of a step (mt.decode.rules)
    candidates = state.topk(log_probs)           TopK: the 2K best one-token extensions per sentence
    state.finish(candidates, ...)                the EOS among the K best become finished hypotheses
    state.advance(candidates)                    the K best that do not end continue (scores, history)
    state.select(keep)                           sentences that are done leave every tensor at once

which is how Sockeye names its pieces (TopK, UpdateScores, SortStates). Each method is tested on
its own in tests/test_beam.py; `beam_search` is the loop. Its settings (the beam K, n_best, the
length penalty, the limits and the guard) are one `mt.decode.rules.SearchSettings`, which
`BeamState` keeps for its scores and its stopping bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.data.tokenizer import BOS_ID, EOS_ID
from mt.decode.rules import SearchSettings, apply_rules, max_output_lengths
from mt.decode.search import Hypothesis, SearchCache, Seq2Seq, topk_candidates


@dataclass
class Candidates:
    """The 2K best one-token extensions of each live sentence's beam, best first (TopK)."""

    values: Tensor  # (N, 2K) cumulative log-probs after the extension
    beams: Tensor  # (N, 2K) long: which of the sentence's K rows each extends
    tokens: Tensor  # (N, 2K) long: the token it adds


@dataclass
class BeamState:
    """The live hypotheses of a beam search: K rows for each of the N sentences still searching."""

    settings: SearchSettings  # the beam K (`k`) and the length penalty (scores, the stopping bound)
    sent: Tensor  # (N,) long: the original index of each live sentence
    scores: Tensor  # (N, K) cumulative log-probs of the live hypotheses, best first (-inf: no hypothesis)
    history: Tensor  # (N*K, t) long: the tokens each live hypothesis has emitted
    parents: Tensor  # (N, K) long: the row (numbered before the last step) each hypothesis extends
    memory: Tensor  # (N*K, S, D) encoder output, repeated per beam row
    src_mask: Tensor  # (N*K, S) bool, True = real token
    max_lens: Tensor  # (N,) long: the longest output allowed before EOS
    final_lp: Tensor  # (N,) the length penalty at that length (the bound's largest denominator)
    num_finished: Tensor  # (N,) long: finished hypotheses so far
    nth_best: Tensor  # (N,) the n_best-th best finished score (-inf until there are n_best)
    step: int = 0  # tokens emitted so far by every live hypothesis
    # The decoder's incremental state, one row per row of the LAST decode step: new row r continues
    # cache row parents[r]. `decode` applies that reorder (one per step, whatever `select` did since).
    cache: SearchCache | None = None
    sentences_left: bool = False  # `select` ran since the last decode: parents cross sentences' rows

    @classmethod
    def start(cls, memory: Tensor, src_mask: Tensor, max_lens: Tensor, settings: SearchSettings) -> BeamState:
        """B sentences' beams of K = settings.beam before the first step. memory (B, S, D), src_mask
        (B, S), max_lens (B,). Each beam holds ONE live hypothesis (the others at -inf), so it never
        holds duplicates."""
        batch, device, k = memory.size(0), memory.device, settings.beam
        expand = torch.arange(batch, device=device).repeat_interleave(k)  # (B*K,) sentence-major rows
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        return cls(settings=settings, sent=torch.arange(batch, device=device), scores=scores,
                   history=torch.empty((batch * k, 0), dtype=torch.long, device=device),
                   parents=torch.arange(batch * k, device=device).view(batch, k),
                   memory=memory.index_select(0, expand), src_mask=src_mask.index_select(0, expand),
                   max_lens=max_lens,
                   final_lp=settings.penalty(max_lens.to(torch.float32) + 1.0),
                   num_finished=torch.zeros(batch, dtype=torch.long, device=device),
                   nth_best=torch.full((batch,), float("-inf"), device=device))

    @classmethod
    def start_cached(cls, model: Seq2Seq, memory: Tensor, src_mask: Tensor, max_lens: Tensor,
                     settings: SearchSettings) -> BeamState:
        """`start`, with the decoder cache made now where the model offers `start_cache`: ONE
        cross-attention entry per sentence that its K rows attend together, instead of K equal
        copies projected, attended and moved at every reorder. The state then keeps a zero-width
        memory (the cache holds all the decoder reads of it), so `select` moves no memory rows."""
        start_cache = getattr(model, "start_cache", None)
        # e.g. a wrapper without an incremental cache (scripts/bench/bench_translate.py)
        if start_cache is None:
            return cls.start(memory, src_mask, max_lens, settings)
        state = cls.start(memory[:, :, :0], src_mask, max_lens, settings)
        # nothing decoded: the first reorder is of 0 positions
        state.cache = start_cache(memory, src_mask, group=settings.beam)
        return state

    @property
    def k(self) -> int:
        """The beam size: rows per sentence."""
        return self.settings.beam

    @property
    def live(self) -> bool:
        return self.sent.numel() > 0

    @property
    def last_tokens(self) -> Tensor:
        """(N*K, 1) the token each live row feeds the decoder next: BOS at the start."""
        if self.history.size(1) == 0:
            return torch.full((self.history.size(0), 1), BOS_ID, dtype=torch.long, device=self.history.device)
        return self.history[:, -1:].contiguous()  # a column view would make the embedding lookup copy

    def at_max_length(self) -> Tensor:
        """(N*K,) bool: rows whose next token must be EOS (the output reached its maximum length)."""
        return (self.max_lens <= self.step).repeat_interleave(self.k)

    def decode(self, model: Seq2Seq) -> Tensor:
        """One decoder step for every live row -> next-token log-probs (N*K, V) float32.

        The cache first follows `parents`: `reorder_beams` (self-attention only) while every row
        stays among its sentence's beams, `reorder` (cross-attention too) once sentences have left.
        """
        if self.cache is not None:
            parents = self.parents.reshape(-1)
            self.cache = (
                self.cache.reorder(parents) if self.sentences_left else self.cache.reorder_beams(parents)
            )
            self.sentences_left = False
        log_probs, self.cache = model.decode_step(self.last_tokens, self.memory, self.src_mask, self.cache)
        return log_probs.float()

    def topk(self, log_probs: Tensor) -> Candidates:
        """TopK: the 2K best extensions of each sentence's K hypotheses. log_probs (N*K, V), banned
        tokens already at -inf (`apply_rules`). 2K, because up to K of them may end in EOS."""
        return Candidates(*topk_candidates(self.scores, log_probs, 2 * self.k))

    def finish(self, cand: Candidates, finished: list[list[Hypothesis]], *, n_best: int) -> None:
        """EOS among a sentence's K best candidates ends that hypothesis: it joins
        `finished[original sentence]` with its log-prob and score, and the sentence's finished count
        and n_best-th best finished score follow."""
        ends = (cand.tokens[:, :self.k] == EOS_ID) & torch.isfinite(cand.values[:, :self.k])
        if not bool(ends.any()):
            return
        penalty = float(self.settings.penalty(float(self.step + 1)))
        touched = set()
        for s, j in ends.nonzero().tolist():
            row = s * self.k + int(cand.beams[s, j])
            log_prob = float(cand.values[s, j])
            finished[int(self.sent[s])].append(
                Hypothesis(self.history[row].tolist(), log_prob / penalty, log_prob)
            )
            touched.add(s)
        for s in touched:
            hyps = finished[int(self.sent[s])]
            self.num_finished[s] = len(hyps)
            if len(hyps) >= n_best:
                self.nth_best[s] = sorted((h.score for h in hyps), reverse=True)[n_best - 1]

    def advance(self, cand: Candidates) -> None:
        """The K best candidates that do not end continue (there are at least K of the 2K: at most
        K end in EOS), in score order: new scores, parents and histories; one more step."""
        n, k = cand.values.size(0), self.k
        is_eos = (cand.tokens == EOS_ID).long()
        order = torch.arange(2 * k, device=cand.values.device)
        # (N, K): non-EOS first, by rank
        pick = (order + is_eos * 2 * k).topk(k, dim=1, largest=False).indices
        self.scores = cand.values.gather(1, pick)
        self.parents = (
            (torch.arange(n, device=cand.values.device) * k).unsqueeze(1) + cand.beams.gather(1, pick)
        )
        tokens = cand.tokens.gather(1, pick)
        self.history = torch.cat(
            [self.history.index_select(0, self.parents.view(-1)), tokens.view(-1, 1)], dim=1
        )
        self.step += 1

    def done(self, best: Tensor | None = None) -> Tensor:
        """(N,) bool: sentences that stop here — K finished hypotheses, past their maximum length, or
        no live hypothesis can still beat the n_best-th finished one. The bound is exact: a live
        log-prob cannot grow, and the length penalty is monotone in |y|, so its largest value over
        the remaining lengths is at an end point (now or at the maximum length). `best` (N,): each
        sentence's best live log-prob, where it is not the first row's (a constrained search's)."""
        best = self.scores[:, 0] if best is None else best
        now_lp = self.settings.penalty(torch.full_like(best, float(self.step + 1)))
        bound = best / torch.maximum(now_lp, self.final_lp)
        return (self.num_finished >= self.k) | (self.max_lens < self.step) | (self.nth_best >= bound)

    def select(self, keep: Tensor) -> None:
        """Keep only the sentences `keep` (N',) long, in that order, in every per-sentence and
        per-row tensor. `parents` keeps the row numbers from before the step (the cache's), so the
        next `decode` drops the cache rows of the sentences that left in the same single reorder."""
        rows = ((keep * self.k).unsqueeze(1) + torch.arange(self.k, device=keep.device)).view(-1)  # (N'*K,)
        self.sent, self.max_lens, self.final_lp = self.sent[keep], self.max_lens[keep], self.final_lp[keep]
        self.num_finished, self.nth_best = self.num_finished[keep], self.nth_best[keep]
        self.scores, self.parents = self.scores.index_select(0, keep), self.parents.index_select(0, keep)
        self.history = self.history.index_select(0, rows)
        self.memory, self.src_mask = self.memory.index_select(0, rows), self.src_mask.index_select(0, rows)
        self.sentences_left = True


def beam_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, settings: SearchSettings, *,
                on_done: Callable[[int, list[Hypothesis]], None] | None = None) -> list[list[Hypothesis]]:
    """Beam search. src, src_mask: (B, S) -> for each sentence its `settings.n_best` hypotheses, best first.

    Scores are `log_prob / length_penalty(|y|)` with |y| counting EOS (see mt.decode.search); every
    step obeys mt.decode.rules (`settings`' limits, banned tokens, loop guard). `on_done(b,
    hypotheses)` is called for sentence b as soon as it stops, with what the returned list will hold for it.
    """
    batch = src.size(0)
    if batch == 0:
        return []
    max_lens = max_output_lengths(src_mask.sum(dim=1), settings)
    state = BeamState.start_cached(model, model.encode(src, src_mask), src_mask, max_lens, settings)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    results: list[list[Hypothesis] | None] = [None] * batch
    n_best = settings.n_best

    def best(b: int) -> list[Hypothesis]:
        results[b] = sorted(finished[b], key=lambda h: -h.score)[:n_best]
        return results[b]

    while state.live:
        log_probs = apply_rules(state.decode(model), settings, at_max=state.at_max_length(),
                                history=lambda: state.history)
        candidates = state.topk(log_probs)  # (N, 2K) each
        state.finish(candidates, finished, n_best=n_best)
        state.advance(candidates)
        done = state.done()  # (N,)
        if bool(done.any()):
            if on_done is not None:
                for b in state.sent[done].tolist():
                    on_done(b, best(b))
            state.select((~done).nonzero().squeeze(1))
    return [hyps if hyps is not None else best(b) for b, hyps in enumerate(results)]
