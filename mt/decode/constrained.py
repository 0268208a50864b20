"""Lexically constrained beam search: outputs that contain given token sequences (glossary terms).

Post & Vilar 2018 ("Fast Lexically Constrained Decoding with Dynamic Beam Allocation"), batched
and vectorised as Hu et al. 2019 do it. Each sentence has constraints, target token-id sequences
its output must contain, each as a contiguous run. Every hypothesis (beam row) tracks which it
has met and how far it is into the one it is writing (`Constraints`). One step:

1. Candidates (`gather_candidates`): the 2K best extensions of the sentence's beam (as plain beam
   search), plus each row's next constraint token (the next token of the constraint it is inside,
   or the first token of every constraint it has not met), plus each row's best continuation.
   A row that breaks off a constraint loses that progress (it may start the same one again).
2. Banks (`allocate`): a candidate's bank is the number of constraint tokens it has met. The K
   places of the beam go round-robin over the banks, each bank's candidates best first and the
   banks with more met first: the best of every non-empty bank, then the second best of each...
   so a bank with few candidates leaves its places to the others (the dynamic allocation).
   Every step the best bank gains a token, so with room every constraint is met.
3. EOS is banned for a row until it has met every constraint, except at the maximum length,
   where every row must end: finished hypotheses rank by constraint tokens met, then by score,
   so a sentence whose constraints cannot all fit gets its best hypothesis meeting the most.
4. `glue` (optional): tokens that may not come right after a completed constraint, because they
   would continue its last word (sentencepiece pieces without the word-start mark '▁'): a term
   "Haus" must not turn into "Hausboot" (mt.decode.terms chooses them for the target language).

The rest is `mt.decode.beam`'s: `BeamState` holds scores, history, parents and the decoder cache
(incremental decoding, one cache reorder a step; ensembles work unchanged), sentences stop as in
`beam_search` (K finished, the maximum length, or the exact bound) and leave the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.data.tokenizer import EOS_ID
from mt.decode.beam import BeamState
from mt.decode.repeats import guard_repeats
from mt.decode.search import (
    Hypothesis,
    Seq2Seq,
    argmax_rows,
    mask_log_probs,
    max_output_lengths,
    topk_candidates,
)
from mt.decode.search import length_penalty as _length_penalty  # the search's keyword shadows it


@dataclass
class Progress:
    """Constraint state of candidates or rows: what is met and how far into the current one."""

    met: Tensor  # (..., C) bool: constraints contained
    current: Tensor  # (...,) long: the constraint being written (-1: none)
    progress: Tensor  # (...,) long: its tokens written so far
    count: Tensor  # (...,) long: constraint tokens met (whole constraints met, plus progress)
    ended: Tensor  # (...,) bool: the last token completed a constraint


@dataclass
class Constraints:
    """The constraints of the N live sentences (K rows each) and every row's `Progress`."""

    tokens: Tensor  # (N, C, L) long: constraint c of sentence n, padded with -1
    lengths: Tensor  # (N, C) long: its length (0: an empty slot)
    rows: Progress  # (N*K, ...) each row's progress

    @classmethod
    def start(cls, constraints: list[list[list[int]]], k: int, device: torch.device) -> Constraints:
        """B sentences' constraints (token-id lists, none empty) before the first step."""
        n, c = len(constraints), max(1, max(map(len, constraints), default=0))
        width = max(1, max((len(seq) for seqs in constraints for seq in seqs), default=0))
        tokens = torch.full((n, c, width), -1, dtype=torch.long)
        lengths = torch.zeros((n, c), dtype=torch.long)
        for i, seqs in enumerate(constraints):
            for j, seq in enumerate(seqs):
                tokens[i, j, :len(seq)] = torch.tensor(seq, dtype=torch.long)
                lengths[i, j] = len(seq)
        zeros = torch.zeros(n * k, dtype=torch.long, device=device)
        rows = Progress(torch.zeros((n * k, c), dtype=torch.bool, device=device), zeros - 1, zeros, zeros, zeros > 0)
        return cls(tokens.to(device), lengths.to(device), rows)

    @property
    def k(self) -> int:
        return self.rows.current.numel() // max(1, self.lengths.size(0))

    def all_met(self) -> Tensor:
        """(N*K,) bool: rows whose hypothesis contains every constraint of its sentence."""
        empty = (self.lengths == 0).repeat_interleave(self.k, dim=0)
        return (self.rows.met | empty).all(dim=1)

    def next_tokens(self) -> tuple[Tensor, Tensor]:
        """(tokens, valid), each (N*K, C): the token that would advance each row on constraint c
        (its next token while the row is inside c, else c's first), valid where c is unmet and
        the row is inside c or inside none."""
        c = self.lengths.size(1)
        tokens = self.tokens.repeat_interleave(self.k, dim=0)  # (N*K, C, L)
        lengths = self.lengths.repeat_interleave(self.k, dim=0)
        inside = torch.arange(c, device=tokens.device) == self.rows.current.unsqueeze(1)  # (N*K, C)
        at = torch.where(inside, self.rows.progress.unsqueeze(1), 0)
        valid = (lengths > 0) & ~self.rows.met & (inside | (self.rows.current < 0).unsqueeze(1))
        return tokens.gather(2, at.unsqueeze(2)).squeeze(2), valid

    def after(self, parents: Tensor, tokens: Tensor) -> Progress:
        """The progress of candidates: row `parents` (N, M) long (absolute rows) extended by
        `tokens` (N, M) -> Progress with fields (N, M, C) / (N, M)."""
        n, m = parents.shape
        met, cur, prog = self.rows.met[parents], self.rows.current[parents], self.rows.progress[parents]
        sent = torch.arange(n, device=parents.device).unsqueeze(1).expand(n, m)
        expected = self.tokens[sent, cur.clamp(min=0), prog.clamp(max=self.tokens.size(2) - 1)]  # (N, M)
        keeps_on = (cur >= 0) & (tokens == expected)
        starts = (self.tokens[:, None, :, 0] == tokens.unsqueeze(2)) & ~met & (self.lengths.unsqueeze(1) > 0)
        start = ~keeps_on & starts.any(dim=2)  # breaking off a constraint may start one (the same) again
        cur = torch.where(keeps_on, cur, torch.where(start, starts.int().argmax(dim=2), -1))
        prog = torch.where(keeps_on, prog + 1, start.long())
        complete = (cur >= 0) & (prog == self.lengths[sent, cur.clamp(min=0)])
        met = met | (F.one_hot(cur.clamp(min=0), met.size(2)).bool() & complete.unsqueeze(2))
        cur, prog = torch.where(complete, -1, cur), torch.where(complete, 0, prog)
        count = (met.long() * self.lengths.unsqueeze(1)).sum(dim=2) + prog
        return Progress(met, cur, prog, count, complete)

    def follow(self, cand: Progress, chosen: Tensor) -> None:
        """The rows become the candidates `chosen` (N, K) (indices into cand's M)."""
        pick = chosen.unsqueeze(2).expand(-1, -1, cand.met.size(2))
        self.rows = Progress(cand.met.gather(1, pick).flatten(0, 1), cand.current.gather(1, chosen).view(-1),
                             cand.progress.gather(1, chosen).view(-1), cand.count.gather(1, chosen).view(-1),
                             cand.ended.gather(1, chosen).view(-1))

    def select(self, keep: Tensor) -> None:
        """Keep only sentences `keep` (N',) long, in order (as `BeamState.select`)."""
        k = self.k
        rows = ((keep * k).unsqueeze(1) + torch.arange(k, device=keep.device)).view(-1)
        self.tokens, self.lengths = self.tokens[keep], self.lengths[keep]
        self.rows = Progress(self.rows.met[rows], self.rows.current[rows], self.rows.progress[rows],
                             self.rows.count[rows], self.rows.ended[rows])


@dataclass
class Candidates:
    """A step's candidate extensions of each sentence's beam (M of them, unordered)."""

    values: Tensor  # (N, M) cumulative log-probs (-inf: no candidate)
    beams: Tensor  # (N, M) long: which of the sentence's K rows each extends
    tokens: Tensor  # (N, M) long: the token it adds
    progress: Progress  # (N, M, ...) its constraint state


def gather_candidates(state: BeamState, cons: Constraints, log_probs: Tensor) -> Candidates:
    """Top 2K, each row's next constraint tokens, each row's best token; each (row, token) once.
    log_probs: (N*K, V) with banned tokens at -inf."""
    n, k = state.scores.shape
    vocab, device = log_probs.size(1), log_probs.device
    v1, b1, t1 = topk_candidates(state.scores, log_probs, 2 * k)  # (N, 2K)
    ctok, valid = cons.next_tokens()  # (N*K, C)
    c = ctok.size(1)
    v2 = (state.scores.reshape(-1, 1) + log_probs.gather(1, ctok.clamp(min=0))).masked_fill(~valid, float("-inf"))
    b2 = torch.arange(k, device=device).repeat_interleave(c).expand(n, k * c)
    best = argmax_rows(log_probs)  # (N*K,)
    v3 = state.scores.reshape(-1) + log_probs.gather(1, best.unsqueeze(1)).squeeze(1)
    b3 = torch.arange(k, device=device).expand(n, k)
    values = torch.cat([v1, v2.view(n, k * c), v3.view(n, k)], dim=1)
    beams = torch.cat([b1, b2, b3], dim=1)
    tokens = torch.cat([t1, ctok.clamp(min=0).view(n, k * c), best.view(n, k)], dim=1)
    # Each (row, token) once: sorted by key, equal keys best first (an invalid copy is at -inf).
    by_value = values.argsort(dim=1, descending=True, stable=True)
    keys, order = (beams * vocab + tokens).gather(1, by_value).sort(dim=1, stable=True)
    order = by_value.gather(1, order)
    dup = torch.zeros_like(keys, dtype=torch.bool)
    dup[:, 1:] = keys[:, 1:] == keys[:, :-1]
    values = values.scatter(1, order, values.gather(1, order).masked_fill(dup, float("-inf")))
    parents = torch.arange(n, device=device).unsqueeze(1) * k + beams
    return Candidates(values, beams, tokens, cons.after(parents, tokens))


def allocate(values: Tensor, banks: Tensor) -> Tensor:
    """The order in which candidates take the beam's places: round-robin over banks (more
    constraint tokens met first), best first inside each; -inf candidates last.
    values, banks: (N, M) -> (N, M) long, a permutation of each row's candidates."""
    _, by_score = values.sort(dim=1, descending=True, stable=True)
    bank = banks.gather(1, by_score)
    top = int(bank.max()) + 1 if bank.numel() else 1
    one_hot = F.one_hot(bank, top)  # (N, M, banks)
    rank = (one_hot.cumsum(dim=1) * one_hot).sum(dim=2) - 1  # place of each candidate inside its bank
    key = rank * top + (top - 1 - bank)
    finite = torch.isfinite(values.gather(1, by_score))
    key = torch.where(finite, key, key.new_tensor(values.size(1) * top) + rank)  # after every finite one
    return by_score.gather(1, key.argsort(dim=1, stable=True))


@dataclass
class Finished:
    """A finished hypothesis of a constrained search, and the constraint tokens it met."""

    hypothesis: Hypothesis
    count: int


def finish(state: BeamState, cand: Candidates, places: Tensor, finished: list[list[Finished]], *,
           n_best: int) -> None:
    """EOS candidates among the K first `places` (N, K) (allocation order) end their hypotheses:
    each joins `finished[original sentence]`; the state's finished count and n-th best follow."""
    tokens, values = cand.tokens.gather(1, places), cand.values.gather(1, places)
    ends = (tokens == EOS_ID) & torch.isfinite(values)
    if not bool(ends.any()):
        return
    penalty = float(_length_penalty(float(state.step + 1), alpha=state.alpha, kind=state.kind))
    for s, j in ends.nonzero().tolist():
        which = int(places[s, j])
        row = s * state.k + int(cand.beams[s, which])
        log_prob = float(cand.values[s, which])
        hyp = Hypothesis(state.history[row].tolist(), log_prob / penalty, log_prob)
        finished[int(state.sent[s])].append(Finished(hyp, int(cand.progress.count[s, which])))
    for s in ends.any(dim=1).nonzero().squeeze(1).tolist():
        hyps = finished[int(state.sent[s])]
        state.num_finished[s] = len(hyps)
        scores = sorted((f.hypothesis.score for f in hyps), reverse=True)
        state.nth_best[s] = scores[n_best - 1] if len(scores) >= n_best else float("-inf")


def advance(state: BeamState, cons: Constraints, cand: Candidates, order: Tensor) -> None:
    """The K first candidates of `order` (N, M) that do not end become the rows: scores, parents,
    histories, constraint progress; one more step."""
    n, k, m = order.size(0), state.k, order.size(1)
    is_eos = (cand.tokens.gather(1, order) == EOS_ID).long()
    places = (torch.arange(m, device=order.device) + is_eos * m).topk(k, dim=1, largest=False).indices
    chosen = order.gather(1, places)  # (N, K) candidate indices
    state.scores = cand.values.gather(1, chosen)
    state.parents = (torch.arange(n, device=order.device) * k).unsqueeze(1) + cand.beams.gather(1, chosen)
    tokens = cand.tokens.gather(1, chosen)
    state.history = torch.cat([state.history.index_select(0, state.parents.view(-1)), tokens.view(-1, 1)], dim=1)
    cons.follow(cand.progress, chosen)
    state.step += 1


def done(state: BeamState) -> Tensor:
    """(N,) bool: `BeamState.done`'s rule with the best live score wherever it sits in the beam
    (banks, not scores, order the rows). Before the maximum length only hypotheses meeting every
    constraint finish, so the bound against the n-th best finished one stays exact."""
    now_lp = _length_penalty(torch.full_like(state.scores[:, 0], float(state.step + 1)), alpha=state.alpha,
                            kind=state.kind)
    bound = state.scores.amax(dim=1) / torch.maximum(now_lp, state.final_lp)
    return (state.num_finished >= state.k) | (state.max_lens < state.step) | (state.nth_best >= bound)


def ranked(found: list[Finished], n_best: int) -> list[Hypothesis]:
    """The `n_best` finished hypotheses meeting the most constraint tokens, best score first among equals."""
    return [f.hypothesis for f in sorted(found, key=lambda f: (-f.count, -f.hypothesis.score))[:n_best]]


def constrained_beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    constraints: list[list[list[int]]],
    *,
    beam: int,
    alpha: float,
    length_penalty: str,
    max_len_a: float,
    max_len_b: int,
    n_best: int,
    forbid_unk: bool,
    max_len_limit: int | None = None,
    on_done: Callable[[int, list[Hypothesis]], None] | None = None,
    glue: Sequence[int] = (),
    no_repeat_ngram_size: int = 0,
    repetition_penalty: float = 1.0,
) -> list[list[Hypothesis]]:
    """Beam search whose outputs contain every constraint of their sentence where they fit (the
    output may be longer than `max_len_a * |src| + max_len_b` by the constraints' pieces).
    src, src_mask: (B, S); constraints: B lists of target token-id sequences -> `beam_search`'s
    result (and `on_done`) for each sentence, ranked by constraint tokens met, then score.
    `glue`: token ids barred right after a completed constraint (module docstring).
    `no_repeat_ngram_size`, `repetition_penalty`: the loop guard (mt.decode.repeats), as in beam search."""
    if beam < 1 or not 1 <= n_best <= beam:
        raise ValueError(f"constrained_beam_search: need 1 <= n_best <= beam, got beam={beam}, n_best={n_best}")
    if len(constraints) != src.size(0) or any(not seq for seqs in constraints for seq in seqs):
        raise ValueError("constrained_beam_search: one list of non-empty constraints per sentence")
    if src.size(0) == 0:
        return []
    # room for the terms on top of the usual limit: a short sentence with a long product name still
    # ends after its name (the limit stays within the model's positions)
    room = torch.tensor([sum(len(seq) for seq in seqs) for seqs in constraints], device=src.device)
    max_lens = max_output_lengths(src_mask, max_len_a=max_len_a, max_len_b=max_len_b) + room
    if max_len_limit is not None:
        max_lens = max_lens.clamp(max=max_len_limit)
    state = BeamState.start_cached(model, model.encode(src, src_mask), src_mask, max_lens, k=beam, alpha=alpha,
                                   kind=length_penalty)
    cons = Constraints.start(constraints, beam, src.device)
    finished: list[list[Finished]] = [[] for _ in constraints]
    glued = torch.tensor(list(glue), dtype=torch.long, device=src.device)
    while state.live:
        at_max = state.at_max_length()
        log_probs = mask_log_probs(state.decode(model), forbid_unk=forbid_unk, force_eos=at_max)
        if no_repeat_ngram_size or repetition_penalty != 1.0:
            guard_repeats(log_probs, state.history, no_repeat_ngram_size=no_repeat_ngram_size,
                          repetition_penalty=repetition_penalty)
        log_probs[:, EOS_ID].masked_fill_(~(cons.all_met() | at_max), float("-inf"))  # no end before every term
        if glued.numel() and bool(cons.rows.ended.any()):  # a term's last word ends with the term
            log_probs[cons.rows.ended.nonzero(), glued] = float("-inf")
        cand = gather_candidates(state, cons, log_probs)
        order = allocate(cand.values, cand.progress.count)  # (N, M)
        finish(state, cand, order[:, :beam], finished, n_best=n_best)
        advance(state, cons, cand, order)
        stop = done(state)
        if bool(stop.any()):
            if on_done is not None:
                for b in state.sent[stop].tolist():
                    on_done(b, ranked(finished[b], n_best))
            keep = (~stop).nonzero().squeeze(1)
            state.select(keep)
            cons.select(keep)
    return [ranked(found, n_best) for found in finished]
