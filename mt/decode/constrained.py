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

Steps 3 and 4, and the placed terms, the words a term replaces and a forced prefix, are rules of
a step like every search's: `Constraints.step_rules` says what they ask of the rows (a
`mt.decode.rules.TermStep`) and `mt.decode.rules.apply_rules` applies them with the rest.
The rest is `mt.decode.beam`'s: `BeamState` holds the settings, scores, history, parents and the
decoder cache (incremental decoding, one cache reorder a step; ensembles work unchanged),
sentences stop as in `beam_search` (K finished, the maximum length, or the exact bound) and leave
the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.data.tokenizer import EOS_ID
from mt.decode.beam import BeamState
from mt.decode.partial import PartialWords
from mt.decode.prefill import forced_start
from mt.decode.rules import SearchSettings, TermStep, apply_rules, max_output_lengths, token_mask
from mt.decode.search import Hypothesis, Seq2Seq, argmax_rows, topk_candidates
from mt.decode.wanted import Wanted, wanted


@dataclass
class Progress:
    """Constraint state of candidates or rows: what is met and how far into the current one."""

    met: Tensor  # (..., C) bool: slots (alternatives) whose constraint is contained
    current: Tensor  # (...,) long: the slot being written (-1: none)
    progress: Tensor  # (...,) long: its tokens written so far
    count: Tensor  # (...,) long: constraint tokens met (whole constraints met, plus progress)
    last: Tensor  # (...,) long: the slot the last token completed (-1: none)

    @property
    def ended(self) -> Tensor:
        """(...,) bool: the last token completed a constraint."""
        return self.last >= 0

    def take(self, index: Tensor) -> Progress:
        """The progress of rows `index` (a long tensor over the first dimension)."""
        return Progress(
            self.met[index], self.current[index], self.progress[index], self.count[index], self.last[index]
        )


@dataclass
class Constraints:
    """The constraints of the N live sentences (K rows each) and every row's `Progress`.

    Each alternative of a constraint is a slot; meeting one meets its constraint (all its slots).
    A row writing a slot is in fact writing every slot that shares the prefix written so far
    (`prefix_eq`), so alternatives with a common start ("Gas|se", "Gas|sen") stay open together."""

    tokens: Tensor  # (N, C, L) long: slot c of sentence n, padded with -1
    lengths: Tensor  # (N, C) long: its length (0: an empty slot)
    group: Tensor  # (N, C) long: the constraint slot c is an alternative of (-1: empty)
    credit: Tensor  # (N, C) long: a constraint's longest alternative, on its first slot (0 elsewhere)
    prefix_eq: Tensor  # (N, C, C, L + 1) bool: slots a and b agree on their first p tokens
    avoid: Tensor  # (N, A, La) long: sequences to avoid, right-aligned, padded in front with -1
    prefix: Tensor  # (N, P) long: the tokens each output starts with, padded with -1
    place: Tensor  # (N,) long: the step at which a required constraint must start (-1: none)
    rows: Progress  # (N*K, ...) each row's progress
    # `next_tokens()` of the current rows, computed once a step (rows change in `follow`, `select`)
    _next: tuple[Tensor, Tensor] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, constraints: Sequence[Wanted | Sequence[Sequence[int]]], k: int,
              device: torch.device) -> Constraints:
        """B sentences' constraints (token-id sequences, none empty) before the first step."""
        found = [wanted(x) for x in constraints]
        slots = [[(g, alt) for g, alts in enumerate(w.require) for alt in alts] for w in found]
        n, c = len(found), max(1, max(map(len, slots), default=0))
        width = max(1, max((len(alt) for row in slots for _, alt in row), default=0))
        tokens = torch.full((n, c, width), -1, dtype=torch.long)
        lengths = torch.zeros((n, c), dtype=torch.long)
        group = torch.full((n, c), -1, dtype=torch.long)
        credit = torch.zeros((n, c), dtype=torch.long)
        for i, row in enumerate(slots):
            for j, (g, alt) in enumerate(row):
                tokens[i, j, :len(alt)] = torch.tensor(alt, dtype=torch.long)
                lengths[i, j], group[i, j] = len(alt), g
                if j == 0 or row[j - 1][0] != g:
                    credit[i, j] = max(map(len, found[i].require[g]))
        same = (tokens.unsqueeze(2) == tokens.unsqueeze(1)).long().cumprod(dim=3).bool()  # (N, C, C, L)
        prefix_eq = torch.cat([torch.ones_like(same[..., :1]), same], dim=3)
        a = max(1, max((len(w.avoid) for w in found), default=0))
        la = max(1, max((len(seq) for w in found for seq in w.avoid), default=0))
        avoid = torch.full((n, a, la), -1, dtype=torch.long)
        for i, w in enumerate(found):
            for j, seq in enumerate(w.avoid):
                avoid[i, j, la - len(seq):] = torch.tensor(seq, dtype=torch.long)
        prefix = torch.full((n, max((len(w.prefix) for w in found), default=0)), -1, dtype=torch.long)
        for i, w in enumerate(found):
            prefix[i, :len(w.prefix)] = torch.tensor(w.prefix, dtype=torch.long)
        place = torch.tensor([len(w.prefix) if w.place else -1 for w in found], dtype=torch.long)
        zeros = torch.zeros(n * k, dtype=torch.long, device=device)
        rows = Progress(
            torch.zeros((n * k, c), dtype=torch.bool, device=device), zeros - 1, zeros, zeros, zeros - 1
        )
        return cls(tokens.to(device), lengths.to(device), group.to(device), credit.to(device),
                   prefix_eq.to(device), avoid.to(device), prefix.to(device), place.to(device), rows)

    @property
    def k(self) -> int:
        return self.rows.current.numel() // max(1, self.lengths.size(0))

    def all_met(self) -> Tensor:
        """(N*K,) bool: rows whose hypothesis contains every constraint of its sentence."""
        empty = (self.lengths == 0).repeat_interleave(self.k, dim=0)
        return (self.rows.met | empty).all(dim=1)

    def _open(self, sent: Tensor, current: Tensor, progress: Tensor, met: Tensor) -> Tensor:
        """(..., C) bool: the slots a row inside `current` at `progress` (each (...,), sentences
        `sent`) is writing too: unmet, longer than the prefix, and agreeing with it."""
        same = self.prefix_eq[sent, current.clamp(min=0)]  # (..., C, L + 1)
        agree = same.gather(-1, progress[..., None, None].expand(*same.shape[:-1], 1)).squeeze(-1)
        return agree & (self.lengths[sent] > progress.unsqueeze(-1)) & ~met & (current >= 0).unsqueeze(-1)

    def _token_at(self, sent: Tensor, at: Tensor) -> Tensor:
        """(..., C) long: every slot's token at position `at` (...,) of sentences `sent`."""
        tokens = self.tokens[sent]  # (..., C, L)
        at = at.clamp(max=tokens.size(-1) - 1)[..., None, None].expand(*tokens.shape[:-1], 1)
        return tokens.gather(-1, at).squeeze(-1)

    def next_tokens(self) -> tuple[Tensor, Tensor]:
        """(tokens, valid), each (N*K, C): the token that would advance each row on slot c
        (its next token while the row writes c, else c's first), valid where c is unmet and
        the row writes c (`_open`) or none. Computed once for the rows of a step."""
        if self._next is None:
            sent = torch.arange(self.lengths.size(0), device=self.lengths.device).repeat_interleave(self.k)
            rows = self.rows
            inside = self._open(sent, rows.current, rows.progress, rows.met)
            free = (rows.current < 0).unsqueeze(1) & ~rows.met & (self.lengths[sent] > 0)
            at = torch.where(rows.current >= 0, rows.progress, 0)
            self._next = self._token_at(sent, at), inside | free
        return self._next

    def after(self, parents: Tensor, tokens: Tensor) -> Progress:
        """The progress of candidates: row `parents` (N, M) long (absolute rows) extended by
        `tokens` (N, M) -> Progress with fields (N, M, C) / (N, M). A token that completes a
        slot is taken as completing it (before a longer slot it also continues)."""
        n, m = parents.shape
        before = self.rows.take(parents)
        met, cur, prog = before.met, before.current, before.progress
        sent = torch.arange(n, device=parents.device).unsqueeze(1).expand(n, m)
        lengths = self.lengths[sent]  # (N, M, C)
        goes_on = self._open(sent, cur, prog, met) & (self._token_at(sent, prog) == tokens.unsqueeze(2))
        starts = (self.tokens[:, None, :, 0] == tokens.unsqueeze(2)) & ~met & (lengths > 0)
        keeps_on = goes_on.any(dim=2)
        start = ~keeps_on & starts.any(dim=2)  # breaking off a constraint may start one (the same) again
        step = torch.where(keeps_on.unsqueeze(2), goes_on, starts)
        reached = torch.where(keeps_on, prog + 1, start.long())
        prefer = step.long() * (1 + (lengths == reached.unsqueeze(2)).long())  # a completed slot first
        cur = torch.where(keeps_on | start, prefer.argmax(dim=2), -1)
        prog = reached
        complete = (cur >= 0) & (prog == lengths.gather(2, cur.clamp(min=0).unsqueeze(2)).squeeze(2))
        groups = self.group[sent]  # (N, M, C)
        done_group = groups.gather(2, cur.clamp(min=0).unsqueeze(2))  # (N, M, 1)
        met = met | ((groups == done_group) & complete.unsqueeze(2))
        last = torch.where(complete, cur, -1)
        cur, prog = torch.where(complete, -1, cur), torch.where(complete, 0, prog)
        count = (met.long() * self.credit.unsqueeze(1)).sum(dim=2) + prog
        return Progress(met, cur, prog, count, last)

    def continuations(self) -> tuple[Tensor, Tensor]:
        """(tokens, valid), each (N*K, C): for a row whose last token completed slot d, the tokens
        that would carry it on into a longer alternative of the same constraint ("Dame" ->
        "Dame|n"), which the glue may not bar."""
        sent = torch.arange(self.lengths.size(0), device=self.lengths.device).repeat_interleave(self.k)
        last = self.rows.last
        length = self.lengths[sent].gather(1, last.clamp(min=0).unsqueeze(1)).squeeze(1)
        met = torch.zeros_like(self.rows.met)
        longer = self._open(sent, last, length, met)
        same = self.group[sent] == self.group[sent].gather(1, last.clamp(min=0).unsqueeze(1))
        return self._token_at(sent, length).clamp(min=0), longer & same & (last >= 0).unsqueeze(1)

    def banned(self, history: Tensor) -> tuple[Tensor, Tensor]:
        """(tokens, valid), each (N*K, A): the token that would complete avoided sequence a after
        each row's `history` (N*K, T), valid where the history ends with the rest of it."""
        n, a, la = self.avoid.shape
        avoid = self.avoid.repeat_interleave(self.k, dim=0)  # (N*K, A, La)
        if la > 1:
            tail = history[:, -(la - 1):] if history.size(1) >= la - 1 else F.pad(
                history, (la - 1 - history.size(1), 0), value=-2)
            before = avoid[:, :, :-1]
            matches = ((before == tail.unsqueeze(1)) | (before < 0)).all(dim=2)
        else:
            matches = torch.ones(avoid.shape[:2], dtype=torch.bool, device=avoid.device)
        last = avoid[:, :, -1]
        return last.clamp(min=0), matches & (last >= 0)

    def forced(self, step: int) -> Tensor:
        """(N*K,) long: the prefix token each row must write at `step` (-1: none)."""
        if step >= self.prefix.size(1):
            return torch.full((self.rows.current.numel(),), -1, dtype=torch.long, device=self.prefix.device)
        return self.prefix[:, step].repeat_interleave(self.k)

    def step_rules(self, step: int, history: Tensor, glued: Tensor, vocab: int) -> TermStep:
        """What the terms ask of the rows at `step` (a `TermStep` for `apply_rules`), each row with
        its `history` (N*K, t): a placed term's pieces where one starts or goes on, the `glued`
        pieces (G,) long barred after a completed term (not those carrying it into a longer form),
        the pieces completing an avoided sequence, the prefix's piece."""
        k = self.k
        placed = ((self.place >= 0) & (self.place <= step)).repeat_interleave(k)
        here = (self.place == step).repeat_interleave(k) | (placed & (self.rows.current >= 0))
        place = token_mask(*_clamped(self.next_tokens()), vocab) if bool(here.any()) else None
        glue = None
        ended = self.rows.ended.nonzero().squeeze(1)
        if glued.numel() and ended.numel():  # a term's last word ends with the term ...
            glue = torch.zeros((self.rows.last.numel(), vocab), dtype=torch.bool, device=glued.device)
            glue[ended.unsqueeze(1), glued] = True  # (N*K, V), written where it is True only
            carry, longer = self.continuations()  # ... unless it goes on into a longer form of it
            rows, cols = longer.nonzero(as_tuple=True)
            glue[rows, carry[rows, cols]] = False
        avoid = None
        if bool((self.avoid >= 0).any()):
            banned, valid = self.banned(history)
            avoid = token_mask(banned, valid, vocab) if bool(valid.any()) else None
        forced = self.forced(step)
        return TermStep(all_met=self.all_met(), place_rows=here if place is not None else None,
                        place_tokens=place, glue=glue, avoid=avoid,
                        prefix=forced if bool((forced >= 0).any()) else None)

    def follow(self, cand: Progress, chosen: Tensor) -> None:
        """The rows become the candidates `chosen` (N, K) (indices into cand's M)."""
        pick = chosen.unsqueeze(2).expand(-1, -1, cand.met.size(2))
        self._next = None
        self.rows = Progress(cand.met.gather(1, pick).flatten(0, 1), cand.current.gather(1, chosen).view(-1),
                             cand.progress.gather(1, chosen).view(-1), cand.count.gather(1, chosen).view(-1),
                             cand.last.gather(1, chosen).view(-1))

    def select(self, keep: Tensor) -> None:
        """Keep only sentences `keep` (N',) long, in order (as `BeamState.select`)."""
        k = self.k
        rows = ((keep * k).unsqueeze(1) + torch.arange(k, device=keep.device)).view(-1)
        self.tokens, self.lengths, self.group = self.tokens[keep], self.lengths[keep], self.group[keep]
        self.credit, self.prefix_eq, self.avoid = self.credit[keep], self.prefix_eq[keep], self.avoid[keep]
        self.prefix, self.place = self.prefix[keep], self.place[keep]
        self.rows = self.rows.take(rows)
        self._next = None


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
    v2 = (
        (state.scores.reshape(-1, 1) + log_probs.gather(1, ctok.clamp(min=0)))
        .masked_fill(~valid, float("-inf"))
    )
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
    penalty = float(state.settings.penalty(float(state.step + 1)))
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
    state.parents = (
        (torch.arange(n, device=order.device) * k).unsqueeze(1) + cand.beams.gather(1, chosen)
    )
    tokens = cand.tokens.gather(1, chosen)
    state.history = torch.cat(
        [state.history.index_select(0, state.parents.view(-1)), tokens.view(-1, 1)], dim=1
    )
    cons.follow(cand.progress, chosen)
    state.step += 1


def done(state: BeamState) -> Tensor:
    """(N,) bool: `BeamState.done`'s rule with the best live score wherever it sits in the beam
    (banks, not scores, order the rows). Before the maximum length only hypotheses meeting every
    constraint finish, so the bound against the n-th best finished one stays exact."""
    return state.done(state.scores.amax(dim=1))


def ranked(found: list[Finished], n_best: int) -> list[Hypothesis]:
    """The `n_best` finished hypotheses meeting the most constraint tokens, best score first among equals."""
    return [f.hypothesis for f in sorted(found, key=lambda f: (-f.count, -f.hypothesis.score))[:n_best]]


def _clamped(found: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """`cons.next_tokens()` with its padding (-1) made a valid index (masked by `valid` anyway)."""
    tokens, valid = found
    return tokens.clamp(min=0), valid


def constrained_beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor,
                            constraints: Sequence[Wanted | Sequence[Sequence[int]]],
                            settings: SearchSettings, *,
                            on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                            glue: Sequence[int] = ()) -> list[list[Hypothesis]]:
    """Beam search whose outputs contain every constraint of their sentence where they fit (the
    output may be longer than `max_len_a * |src| + max_len_b` by the constraints' pieces).
    src, src_mask: (B, S); constraints: B lists of target token-id sequences, or B `Wanted` (each
    constraint's alternatives, and sequences to avoid) -> `beam_search`'s result (and `on_done`)
    for each sentence, ranked by constraint tokens met, then score, with beam search's `settings`
    (mt.decode.engine gives it a beam of at least `mt.decode.rules.CONSTRAINED_BEAM`). `glue`: token ids
    barred right after a completed constraint (module docstring)."""
    found = [wanted(x) for x in constraints]
    if len(found) != src.size(0) or any(
        not alt for w in found for alts in w.require for alt in [*alts, *alts[:1]]
    ):
        raise ValueError("constrained_beam_search: one list of non-empty constraints per sentence")
    if src.size(0) == 0:
        return []
    # room for the terms on top of the usual limit: a short sentence with a long product name still
    # ends after its name (the limit stays within the model's positions), and after a forced prefix,
    # however long the first pass made it (a looping model's first pass may run past the usual limit)
    room = torch.tensor([sum(max(map(len, alts)) for alts in w.require) for w in found], device=src.device)
    prefix = torch.tensor([len(w.prefix) + len(w.partial) for w in found], device=src.device)
    max_lens = max_output_lengths(src_mask.sum(dim=1), settings, at_least=prefix, room=room)
    memory = model.encode(src, src_mask)  # a typed prefix's forced pieces decoded once (mt.decode.prefill)
    state = (forced_start(model, memory, src_mask, found, max_lens, settings)
             or BeamState.start_cached(model, memory, src_mask, max_lens, settings))
    cons = Constraints.start(found, settings.beam, src.device)
    typed = PartialWords.of(found, settings.beam, src.device)  # a translator's typed word (mt.decode.typed)
    finished: list[list[Finished]] = [[] for _ in found]
    glued = torch.tensor(list(glue), dtype=torch.long, device=src.device)
    while state.live:
        log_probs = state.decode(model)
        at_max = state.at_max_length()
        terms = cons.step_rules(state.step, state.history, glued, log_probs.size(1))
        if typed is not None:
            terms.partial = typed.mask(state.step, state.history, log_probs.size(1))
        log_probs = apply_rules(
            log_probs, settings, at_max=at_max, history=lambda: state.history, terms=terms
        )
        cand = gather_candidates(state, cons, log_probs)
        order = allocate(cand.values, cand.progress.count)  # (N, M)
        finish(state, cand, order[:, :settings.beam], finished, n_best=settings.n_best)
        advance(state, cons, cand, order)
        stop = done(state)
        if bool(stop.any()):
            if on_done is not None:
                for b in state.sent[stop].tolist():
                    on_done(b, ranked(finished[b], settings.n_best))
            keep = (~stop).nonzero().squeeze(1)
            state.select(keep)
            cons.select(keep)
            if typed is not None:
                typed.select(keep)
    return [ranked(found, settings.n_best) for found in finished]
