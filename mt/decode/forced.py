"""Forced decoding: the model's log-probability of given translations (`mt score`).

Scoring sentence pairs is how a trained model filters a noisy corpus or reranks an n-best
list. The conventions are search's (see mt/decode/search.py): a target `y` is scored as the n + 1
decisions `y_1 .. y_n EOS` after BOS, `log_prob` sums their log-probabilities, and the
length-normalised score divides it by the decode config's length penalty of |y| = n + 1,
so scoring a beam search output gives back exactly that hypothesis' `log_prob` and `score`.
Scores come from the full (uncached) teacher-forced decoder, an independent check of the
cached incremental decoding that search uses. `choose_outputs` ranks given candidate outputs of a
source the same way (a glossary term put in place of the model's word, in each of its forms).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from mt.config import DecodeConfig
from mt.data.batching import collate_source, pair_batches
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from mt.decode.rules import SearchSettings, length_penalty
from mt.decode.search import Hypothesis, Seq2Seq
from mt.errors import MTError, MTWarning
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer


def force_decode_score(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, tgt: list[list[int]],
                       memory: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probability of each target `y EOS` under teacher forcing with the full (uncached)
    decoder. `model` has the search interface (a Transformer, an Ensemble, a test double);
    src, src_mask: (B, S); tgt: B token lists without BOS/EOS -> (B,) float32. `memory` (B, S, D):
    a Transformer's encoding of `src`, when the caller has it (several targets of one source)."""
    batch = len(tgt)
    width = max((len(t) for t in tgt), default=0) + 1
    tgt_in = torch.full((batch, width), PAD_ID, dtype=torch.long, device=src.device)  # BOS y PAD..
    tgt_out = torch.full((batch, width), PAD_ID, dtype=torch.long, device=src.device)  # y EOS PAD..
    for i, seq in enumerate(tgt):
        tgt_in[i, : len(seq) + 1] = torch.tensor([BOS_ID, *seq], dtype=torch.long)
        tgt_out[i, : len(seq) + 1] = torch.tensor([*seq, EOS_ID], dtype=torch.long)
    if memory is not None and isinstance(model, Transformer):
        logits = model.decode(tgt_in, memory, src_mask)
    else:
        logits = model.forward(src, src_mask, tgt_in)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    picked = log_probs.gather(2, tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
    lengths = torch.tensor([len(t) for t in tgt], device=src.device)
    real = torch.arange(width, device=src.device).unsqueeze(0) <= lengths.unsqueeze(1)  # (B, T) y and EOS
    return picked.masked_fill(~real, 0.0).sum(dim=1)


CHOICE_NODES = 2048  # tree nodes (padding included) decoded in one pass: bounds its (nodes, V) log-probs


def choose_outputs(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor,
                   choices: Sequence[Sequence[Sequence[int]]],
                   settings: SearchSettings) -> list[list[Hypothesis]]:
    """Each source's candidate outputs ranked by their log-prob (teacher-forced, as
    `force_decode_score`), the `settings.n_best` first, each with beam search's score (log-prob over
    the length penalty of |y| + 1, `settings.score`). Not by that score: the candidates are one
    translation in several forms of a word ("hound", "hounds"), and the penalty, a search's remedy
    for short hypotheses, would favour the form with more pieces whatever the sentence needs.
    src, src_mask: (B, S); choices: B non-empty lists of token lists (no BOS/EOS) -> B lists of
    `Hypothesis`. A Transformer encodes each source once and decodes its candidates as one tree
    (`Transformer.decode_tree`): a prefix that several candidates share is decoded and projected
    onto the vocabulary once, not once per candidate (a sentence with two words to replace, each
    in four forms, offers 16 candidates that differ in two words). Sources of similar tree size
    run together, at most `CHOICE_NODES` nodes a pass (more only for one source with more)."""
    if not isinstance(model, Transformer):  # an ensemble, a test double: the full pass for each candidate
        return _ranked(choices, [force_decode_score(model, src[[b] * len(seqs)], src_mask[[b] * len(seqs)],
                                                    [list(seq) for seq in seqs]).tolist()
                                 for b, seqs in enumerate(choices)], settings)
    memory = model.encode(src, src_mask)  # (B, S, D)
    trees = [_Tree(seqs) for seqs in choices]
    log_probs: list[list[float]] = [[] for _ in choices]
    group: list[int] = []
    order = sorted(range(len(trees)), key=lambda b: len(trees[b].tokens))
    for n, b in enumerate(order):
        group.append(b)
        following = order[n + 1] if n + 1 < len(order) else None
        if following is None or (len(group) + 1) * len(trees[following].tokens) > CHOICE_NODES:
            for i, values in zip(group, _tree_scores(model, memory[group], src_mask[group],
                                                     [trees[i] for i in group])):
                log_probs[i] = values
            group = []
    return _ranked(choices, log_probs, settings)


class _Tree:
    """One source's candidates as a prefix tree: `tokens` the nodes' input tokens (BOS at the root,
    node 0), `depths` their positions, `parents` each node's parent (-1 for the root; a parent
    comes before its children), `paths[c]` candidate c's nodes from the root and `targets[c]` the
    tokens they predict (the candidate, then EOS)."""

    def __init__(self, seqs: Sequence[Sequence[int]]) -> None:
        self.tokens, self.depths, self.parents = [BOS_ID], [0], [-1]
        self.paths: list[list[int]] = []
        self.targets = [[*seq, EOS_ID] for seq in seqs]
        index: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
        for seq in seqs:
            path = [0]
            for token in seq:
                key = (path[-1], token)
                if key not in index:
                    index[key] = len(self.tokens)
                    self.tokens.append(token)
                    self.depths.append(self.depths[path[-1]] + 1)
                    self.parents.append(path[-1])
                path.append(index[key])
            self.paths.append(path)


def _tree_scores(model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor,
                 trees: Sequence[_Tree]) -> list[list[float]]:
    """The log-prob of each candidate `y EOS` of each source (memory (B, S, D), src_mask (B, S)),
    from one pass of `Transformer.decode_tree` over the sources' trees: the sum, along the
    candidate's path, of each node's log-prob of the token that follows it."""
    width = max(len(tree.tokens) for tree in trees)
    tokens = torch.full((len(trees), width), PAD_ID, dtype=torch.long)
    depths = torch.zeros((len(trees), width), dtype=torch.long)
    sees = np.tile(np.eye(width, dtype=bool), (len(trees), 1, 1))  # (B, N, N): padding sees itself
    for b, tree in enumerate(trees):
        tokens[b, :len(tree.tokens)] = torch.tensor(tree.tokens)
        depths[b, :len(tree.depths)] = torch.tensor(tree.depths)
        for node, parent in enumerate(tree.parents[1:], start=1):  # a node sees what its parent sees
            sees[b, node] |= sees[b, parent]
    real = torch.arange(width).unsqueeze(0) < torch.tensor([len(t.tokens) for t in trees]).unsqueeze(1)
    device = memory.device
    states = model.decode_tree(tokens.to(device), depths.to(device), torch.from_numpy(sees).to(device),
                               memory, src_mask)
    # (real nodes, V): every node's log-probs are read, by the candidates through it
    log_probs = torch.log_softmax(model._logits(states[real.to(device)]).float(), dim=-1)
    first = [0]  # each tree's first row in `log_probs`
    for tree in trees:
        first.append(first[-1] + len(tree.tokens))
    paths = [(first[b] + node, token) for b, tree in enumerate(trees)
             for path, target in zip(tree.paths, tree.targets) for node, token in zip(path, target)]
    rows, targets = torch.tensor(paths, device=device).unbind(1)  # each decision: its node, its token
    values = log_probs[rows, targets].tolist()
    out: list[list[float]] = []
    at = 0
    for tree in trees:
        out.append([])
        for path in tree.paths:
            out[-1].append(float(sum(values[at:at + len(path)])))  # the path's decisions, in order
            at += len(path)
    return out


def _ranked(choices: Sequence[Sequence[Sequence[int]]], log_probs: Sequence[Sequence[float]],
            settings: SearchSettings) -> list[list[Hypothesis]]:
    """Each source's candidates as `Hypothesis` (score: log-prob / length penalty), most probable
    first, `settings.n_best` of them."""
    out = []
    for seqs, values in zip(choices, log_probs):
        hyps = [Hypothesis(list(seq), settings.score(lp, len(seq)), lp) for seq, lp in zip(seqs, values)]
        out.append(sorted(hyps, key=lambda h: -h.log_prob)[:settings.n_best])
    return out


@dataclass(frozen=True)
class PairScore:
    """One pair's forced-decoding score."""

    log_prob: float  # sum over the |y| + 1 scored decisions, EOS included
    length: int  # |y| + 1: target pieces plus EOS
    normalized: float  # log_prob / length_penalty(|y| + 1): beam search's `score` for this output

    @property
    def per_token(self) -> float:
        """Average log-probability per scored decision."""
        return self.log_prob / self.length


def score_pairs(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    decode: DecodeConfig,
    *,
    max_positions: int,
    device: torch.device | str,
    progress: bool = False,
) -> list[PairScore]:
    """Score raw (source, target) line pairs under forced decoding -> one PairScore per pair, in
    input order. `model` is a Transformer or an Ensemble; `max_positions` its sequence limit.

    Pairs run in length-sorted batches of at most `decode.resources.max_tokens` padded source plus target
    tokens; normalisation uses `decode.search.length_penalty` and `decode.search.alpha`. Sources longer than
    the model accepts are truncated with a warning, as translation does; a target longer than
    the model can decode is an MTError naming its line. The model runs in eval mode under
    `torch.inference_mode()` and its train/eval mode is restored.
    """
    if len(src_lines) != len(tgt_lines):
        raise MTError(f"scoring: {len(src_lines)} source lines but {len(tgt_lines)} target lines")
    search = decode.search
    length_penalty(1.0, alpha=search.alpha, kind=search.length_penalty)  # check the kind before any work
    src_ids = tokenizer.encode_src(list(src_lines))
    tgt_ids = tokenizer.encode_tgt(list(tgt_lines))
    limit = max_positions - 1  # the source gets an EOS, the decoder input a BOS
    if any(len(seq) > limit for seq in src_ids):
        warnings.warn(f"source lines longer than {limit} pieces are truncated", MTWarning, stacklevel=2)
        src_ids = [seq[:limit] for seq in src_ids]
    for number, seq in enumerate(tgt_ids, start=1):
        if len(seq) > limit:
            raise MTError(f"target line {number}: {len(seq)} pieces, more than the model's limit of {limit}")
    batches = pair_batches(np.array([len(s) for s in src_ids]), np.array([len(t) for t in tgt_ids]),
                           max_tokens=decode.resources.max_tokens, max_sentences=decode.resources.max_tokens)
    log_probs = [0.0] * len(src_ids)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(src_ids), disable=not progress, file=sys.stderr,
                                          unit="pair", desc="score") as bar:
            for batch in batches:
                rows = batch.tolist()
                src, src_mask = collate_source([src_ids[i] for i in rows])
                scores = force_decode_score(
                    model, src.to(device), src_mask.to(device), [tgt_ids[i] for i in rows]
                )
                for row, value in zip(rows, scores.tolist()):
                    log_probs[row] = value
                bar.update(len(rows))
    finally:
        model.train(was_training)
    results = []
    for value, seq in zip(log_probs, tgt_ids):
        n = len(seq) + 1
        penalty = float(length_penalty(float(n), alpha=search.alpha, kind=search.length_penalty))
        results.append(PairScore(value, n, value / penalty))
    return results
