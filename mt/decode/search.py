"""Greedy search, and what every search shares: the model interface, hypotheses, the live rows,
top-k candidates (beam search itself is mt.decode.beam). The rules a step obeys (length limits,
banned tokens, the loop guard) and the settings every search takes (`SearchSettings`) are
mt.decode.rules'; `length_penalty` is re-exported here, where scores are defined.

Every search (greedy, beam, sampling) only needs `model.encode(src, src_mask)` and
`model.decode_step(tokens (R, 1), memory, src_mask, cache) -> (log_probs (R, V), cache)` with
`cache.reorder(index)` / `cache.reorder_beams(index)` (`SearchCache`): the decoder sees one new
token per row and step, never the prefix again.

Conventions (shared by greedy, beam, sampling in mt/decode/sampling.py and forced decoding in
mt/decode/forced.py):
- A hypothesis is `y_1 .. y_n EOS`; `tokens` exclude BOS and EOS. Its `log_prob` sums the
  log-probabilities of all n+1 decisions, the final EOS included.
- `|y|` in the length penalty counts EOS too (`|y| = n + 1`, the number of scored decisions), so
  `score = log_prob / length_penalty(n + 1)`.
- The maximum output length is `floor(a * |src| + b)` tokens before EOS, with `|src|` the number
  of real (unmasked) source tokens. At that length only EOS is allowed, so every hypothesis ends
  in a scored EOS and force-decoding it gives back its `log_prob` exactly.
- Every search calls `mt.decode.rules.apply_rules` on each step's log-probs: PAD and BOS are never
  emitted, `forbid_unk` also bans UNK (banned tokens are set to -inf without renormalising, so
  scores stay the model's own log-probabilities), EOS is forced at the maximum length, and the
  loop guard (mt.decode.repeats) works on the same log-probs after those bans, from each
  hypothesis' own history; a ban keeps scores the model's own, a penalty other than 1 makes them
  the penalised ones.

Beam search (mt/decode/beam.py) keeps `beam` live hypotheses per sentence in one batch of B*K rows. A sentence
stops when it has `beam` finished hypotheses (the usual criterion; it makes beam 1 equal to
greedy), when it reaches its maximum length, or as soon as no live hypothesis can still beat its
`n_best`-th finished one (an exact bound, so it never changes the result). Stopped sentences'
rows leave the batch, and the search ends when every sentence has stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode.rules import SearchSettings, apply_rules, max_output_lengths
from mt.decode.rules import length_penalty as length_penalty  # re-exported: the scores' convention lives here


class SearchCache(Protocol):
    """What search needs from the model's incremental decoding state (one entry per batch row),
    e.g. mt.model.transformer.DecoderCache."""

    def reorder(self, index: torch.Tensor) -> SearchCache:
        """Keep/duplicate/drop rows: new row i is old row `index[i]` (index: (R',) long)."""
        ...

    def reorder_beams(self, index: torch.Tensor) -> SearchCache:
        """Like `reorder`, for an `index` (R,) that only moves rows among the beams of one
        sentence (so state shared by a sentence's beams need not be copied)."""
        ...


class Seq2Seq(Protocol):
    """What search needs from a model (mt.model.transformer.Transformer, or a test double)."""

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src, src_mask: (B, S) -> memory (B, S, D)."""
        ...

    def decode_step(
        self, tokens: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache: SearchCache | None
    ) -> tuple[torch.Tensor, SearchCache]:
        """tokens (R, 1) -> next-token log-probs (R, V) float32 and the extended cache. memory and
        src_mask are read only without a cache (beam search may then pass a zero-width memory:
        its cache came from the model's `start_cache`, one cross-attention entry per sentence)."""
        ...

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Full teacher-forced decoding: tgt_in (B, T) -> logits (B, T, V)."""
        ...


@dataclass(frozen=True)
class Hypothesis:
    """One finished translation: tokens without BOS/EOS, length-normalised score, raw log-prob."""

    tokens: list[int]
    score: float
    log_prob: float


CHUNK = 64  # vocabulary entries per chunk in `chunk_max` / the two-stage top-k


def chunk_max(x: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """Maxima of consecutive chunks of `chunk` columns: x (R, V) -> (R, ceil(V / chunk)).

    `amax` over a (R, V // chunk, chunk) view is vectorised; torch's CPU `argmax`/`topk` over a
    whole row are several times slower than this pass, so both searches first find the chunks
    that can hold their answer and then look only inside those.
    """
    rows, vocab = x.shape
    whole = vocab // chunk
    parts = []
    if whole:
        strides = (x.stride(0), chunk * x.stride(1), x.stride(1))
        parts.append(x.as_strided((rows, whole, chunk), strides).amax(dim=2))
    if vocab % chunk:
        parts.append(x[:, whole * chunk:].amax(dim=1, keepdim=True))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def _chunk_columns(chunks: torch.Tensor, vocab: int, chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns of chunk ids (...,) -> (columns (..., chunk) clamped into [0, V), valid (..., chunk))."""
    cols = chunks.unsqueeze(-1) * chunk + torch.arange(chunk, device=chunks.device)
    return cols.clamp(max=vocab - 1), cols < vocab


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """x (R, V) -> (R,) index of each row's maximum, the first one on ties (as `argmax`), via the
    chunk maxima: the first chunk holding the row maximum, then the first maximum inside it."""
    best = chunk_max(x).argmax(dim=1)  # (R,) first chunk holding the maximum
    cols, valid = _chunk_columns(best, x.size(1))  # (R, CHUNK)
    vals = x.gather(1, cols).masked_fill(~valid, float("-inf"))
    return cols.gather(1, vals.argmax(dim=1, keepdim=True)).squeeze(1)


def topk_candidates(scores: torch.Tensor, log_probs: torch.Tensor,
                    k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The k best one-token extensions of each sentence's beam.

    scores: (N, K) cumulative log-probs of the live hypotheses; log_probs: (N*K, V) next-token
    log-probs, rows sentence-major. Returns (values, beam index, token), each (N, k), best first.

    Two stages, exact: the k best candidates lie in the k chunks (of CHUNK tokens of one beam
    row) with the best `score + chunk maximum` — any other chunk's maximum is beaten by k
    candidates already — so top-k runs over those k * CHUNK entries instead of K * V. Among
    exactly equal candidates the choice may differ from a plain top-k over K * V.
    """
    n, beam = scores.shape
    rows_total, vocab = log_probs.shape
    cm = chunk_max(log_probs)  # (N*K, C)
    per_row = cm.size(1)
    k_chunks = min(k, beam * per_row)
    _, best = (scores.reshape(rows_total, 1) + cm).view(n, beam * per_row).topk(k_chunks, dim=1)  # (N, k')
    first_row = (torch.arange(n, device=scores.device) * beam).unsqueeze(1)  # (N, 1)
    rows = first_row + torch.div(best, per_row, rounding_mode="floor")  # (N, k') row of each chunk
    cols, valid = _chunk_columns(best % per_row, vocab)  # (N, k', CHUNK)
    vals = log_probs.reshape(-1)[rows.unsqueeze(-1) * vocab + cols].masked_fill(~valid, float("-inf"))
    vals = (vals + scores.reshape(-1)[rows].unsqueeze(-1)).view(n, -1)  # (N, k' * CHUNK)
    values, flat = vals.topk(k, dim=1)  # sorted, best first
    beams = rows.gather(1, torch.div(flat, CHUNK, rounding_mode="floor")) - first_row
    return values, beams, cols.view(n, -1).gather(1, flat)


@dataclass
class LiveRows:
    """The rows a one-hypothesis-per-row search (greedy, sampling) still decodes; finished rows
    (EOS emitted) leave, so their memory and cache rows stop costing anything."""

    rows: torch.Tensor  # (R,) long: the original row of each live row
    max_lens: torch.Tensor  # (R,) long: its maximum output length (EOS is forced there)
    memory: torch.Tensor  # (R, S, D) encoder output
    src_mask: torch.Tensor  # (R, S) bool, True = real token
    out: torch.Tensor  # (B, W) long: every original row's tokens so far (PAD after them)
    step: int = 0  # tokens emitted so far by every live row
    cache: SearchCache | None = None  # the decoder's, from the last decode_step

    def history(self) -> torch.Tensor:
        """(R, step) long: the tokens each live row has emitted (what the loop guard reads)."""
        return self.out[self.rows, :self.step]

    def at_max_length(self) -> torch.Tensor:
        """(R,) bool: rows whose next token must be EOS (the output reached its maximum length)."""
        return self.max_lens <= self.step

    def drop_finished(self, next_tok: torch.Tensor) -> torch.Tensor:
        """Drop the rows whose `next_tok` (R,) is EOS; returns the tokens of the rows left (R',).
        When none is left only `rows` empties (the search loop ends; nothing else is read)."""
        live = next_tok != EOS_ID
        if bool(live.all()):
            return next_tok
        keep = live.nonzero().squeeze(1)
        if keep.numel() == 0:  # all done (at batch 1, every sentence's end): nothing left to reorder
            self.rows = keep
            return next_tok[keep]
        self.rows, self.max_lens = self.rows[keep], self.max_lens[keep]
        self.memory, self.src_mask = self.memory.index_select(0, keep), self.src_mask.index_select(0, keep)
        if self.cache is not None:
            self.cache = self.cache.reorder(keep)
        return next_tok[keep]


def _report_ended(rows: list[int], out: torch.Tensor, total: torch.Tensor, step: int,
                  settings: SearchSettings, on_done: Callable[[int, list[Hypothesis]], None]) -> None:
    """Hand each of `rows`, which emitted EOS at `step`, its hypothesis: tokens out[row, :step]
    (out: (B, W) long), log-prob total[row] (total: (B,)), scored by `settings`."""
    if rows:
        for row, tokens, log_prob in zip(rows, out[rows, :step].tolist(), total[rows].tolist()):
            on_done(row, [Hypothesis(tokens, settings.score(log_prob, step), log_prob)])


def greedy_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, settings: SearchSettings, *,
                  on_done: Callable[[int, list[int]], None] | None = None) -> list[list[int]]:
    """Pick the most probable token at each step. src, src_mask: (B, S) -> B token lists (no BOS/EOS).

    `settings` (its length limits, `forbid_unk` and loop guard; the beam is 1 whatever it says)
    rules every step (mt.decode.rules). Finished sentences leave the batch (their cache rows are
    dropped). `on_done(b, tokens)` is called for sentence b as soon as it ends (EOS), with the tokens
    the returned list will hold for it, while longer sentences go on (a server answers its client then).
    `greedy_hypotheses` is the same search with each output's log-prob and score.
    """
    def report(b: int, hyps: list[Hypothesis]) -> None:
        on_done(b, hyps[0].tokens)  # type: ignore[misc]  # only passed on when given

    found = greedy_hypotheses(model, src, src_mask, settings, on_done=report if on_done is not None else None)
    return [hyps[0].tokens for hyps in found]


def greedy_hypotheses(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, settings: SearchSettings,
                      *, on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                      ) -> list[list[Hypothesis]]:
    """`greedy_search` with each sentence's output as a one-element list of `Hypothesis`: its
    log-prob summed over every decision (EOS included) in float32 as beam search sums it, and its
    score (`settings.score`), so beam 1's hypotheses are these. `on_done(b, [hyp])`."""
    batch = src.size(0)
    if batch == 0:
        return []
    device = src.device
    memory = model.encode(src, src_mask)  # (B, S, D)
    max_lens = max_output_lengths(src_mask.sum(dim=1), settings)
    out = torch.full((batch, int(max_lens.max().item()) + 1), PAD_ID, dtype=torch.long, device=device)
    total = torch.zeros(batch, device=device)  # (B,) float32 log-prob so far
    live = LiveRows(torch.arange(batch, device=device), max_lens, memory, src_mask, out)
    tokens = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=device)
    while live.rows.numel() > 0:
        log_probs, live.cache = model.decode_step(tokens, live.memory, live.src_mask, live.cache)  # (R, V)
        log_probs = apply_rules(log_probs, settings, at_max=live.at_max_length(), history=live.history)
        next_tok = argmax_rows(log_probs)  # (R,)
        out[live.rows, live.step] = next_tok
        total[live.rows] += log_probs.gather(1, next_tok.unsqueeze(1)).squeeze(1).float()
        if on_done is not None:
            _report_ended(live.rows[next_tok == EOS_ID].tolist(), out, total, live.step, settings, on_done)
        live.step += 1
        tokens = live.drop_finished(next_tok).unsqueeze(1)
    results = []
    for row, log_prob in zip(out.tolist(), total.tolist()):
        toks = row[: row.index(EOS_ID)]  # every row ends in EOS (forced at max length)
        results.append([Hypothesis(toks, settings.score(log_prob, len(toks)), log_prob)])
    return results
