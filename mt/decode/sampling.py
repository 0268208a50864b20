"""Sampling: draw translations from the model instead of searching for the best one.

Sampled back-translations train better models than beam outputs (Edunov et al. 2018,
"Understanding Back-Translation at Scale"): they cover the model's distribution, not its mode.
`sample_search` is ancestral sampling over the same incremental decoding interface as
`mt.decode.search` (`encode`, `decode_step`, `cache.reorder`) and follows its conventions: tokens
exclude BOS/EOS, `log_prob` is the model's own log-probability including the final EOS. Every step
obeys the rules every search does (mt.decode.rules: the maximum output length
`floor(a * |src| + b)` with EOS forced there, PAD/BOS and UNK with `forbid_unk` never emitted,
the loop guard), and only then is filtered and drawn from. Its settings are a `SearchSettings`
whose `sampling` (`Sampling`: temperature, top-k, top-p, seed) is set. (A module of its own beside
mt/decode/search.py, which holds greedy search and the shared pieces.)

Reproducibility: every random number comes from `sample_uniforms`, one `torch.Generator` per
(seed, sentence id, sample index), never from the global RNG. With sentence ids = input line
numbers, the same file and seed give the same samples whatever the batch size or batch order
(the draws are also the same on every device; only the model's own arithmetic may differ in the
last bits there); another seed gives other samples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode.rules import Sampling, SearchSettings, apply_rules, max_output_lengths
from mt.decode.search import Hypothesis, LiveRows, Seq2Seq


def filter_log_probs(log_probs: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The sampling distribution of each row: log-probs (R, V) divided by `sampling.temperature`,
    then restricted to the `top_k` most probable tokens (0 = no limit), then to the nucleus: the
    fewest most probable tokens whose probability (after temperature and top-k) reaches
    `top_p` (1.0 = no limit; the most probable token always stays). Returns normalised
    log-probs (R, V) float32, -inf outside the kept set. Banned (-inf) tokens stay banned.

    Order and conventions follow Hugging Face `generate` (temperature, top-k, top-p); the
    nucleus keeps a token when the mass of the tokens before it is still below `top_p`.
    `Sampling` checked the three when it was made.
    """
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    neg_inf = float("-inf")
    scaled = torch.log_softmax(log_probs.float() / temperature, dim=-1)  # (R, V)
    if 0 < top_k < scaled.size(1):
        kth = scaled.topk(top_k, dim=1).values[:, -1:]  # (R, 1)
        scaled = scaled.masked_fill(scaled < kth, neg_inf)  # ties with the k-th stay: never fewer than k
        scaled = torch.log_softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_lp, order = scaled.sort(dim=1, descending=True)
        before = sorted_lp.exp().cumsum(dim=1) - sorted_lp.exp()  # (R, V) mass of the better tokens
        drop_sorted = before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
        scaled = torch.log_softmax(scaled.masked_fill(drop, neg_inf), dim=-1)
    return scaled


def sample_uniforms(seed: int, keys: list[tuple[int, int]], length: int) -> torch.Tensor:
    """`length` uniforms in [0, 1) for each (sentence id, sample index) key -> (R, length) float64,
    on the CPU. Each row comes from its own `torch.Generator` seeded by a hash of (seed, key), so a
    sentence's draws depend only on the seed, its id and the sample index: never on the global
    RNG, the batch it is decoded in, or the device."""
    out = torch.empty(len(keys), length, dtype=torch.float64)
    gen = torch.Generator()
    for row, (sentence, sample) in enumerate(keys):
        digest = hashlib.blake2b(f"{seed}:{sentence}:{sample}".encode(), digest_size=8).digest()
        gen.manual_seed(int.from_bytes(digest, "little") >> 1)  # 63 bits: manual_seed's safe range
        out[row] = torch.rand(length, generator=gen, dtype=torch.float64)
    return out


def draw_tokens(log_probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: for each row the first token whose cumulative probability exceeds its
    uniform. log_probs: (R, V) normalised (-inf = never drawn); uniforms: (R,) in [0, 1) -> (R,) long.
    A token of probability 0 is never drawn (its CDF step is flat)."""
    probs = log_probs.double().exp()  # float64: the CDF of 8k-32k tokens keeps its precision
    cdf = probs.cumsum(dim=1)  # (R, V)
    target = (uniforms.to(cdf) * cdf[:, -1]).unsqueeze(1)  # (R, 1) scaled to the CDF's own total
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(1)  # first cdf > target
    # Rounding can put the target at the very top: take the last token with positive probability.
    last = torch.where(probs > 0, torch.arange(probs.size(1), device=probs.device), 0).amax(dim=1)
    return torch.minimum(tokens, last)


def _samples_of(rows: list[list[int]], values: list[float], settings: SearchSettings) -> list[Hypothesis]:
    """One sentence's samples from its rows of `out` and `log_prob`, highest score first (stable:
    equal scores keep draw order)."""
    hyps = []
    for row, value in zip(rows, values):
        toks = row[: row.index(EOS_ID)]  # every row ends in EOS (forced at max length)
        hyps.append(Hypothesis(toks, settings.score(value, len(toks)), value))
    return sorted(hyps, key=lambda h: -h.score)


def sample_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, settings: SearchSettings, *,
                  sentence_ids: list[int] | None = None,
                  on_done: Callable[[int, list[Hypothesis]], None] | None = None) -> list[list[Hypothesis]]:
    """Draw `settings.n_best` translations per sentence from the model (ancestral sampling with
    temperature, top-k and nucleus filtering, `settings.sampling`, see `filter_log_probs`).
    src, src_mask: (B, S) -> for each sentence its samples, highest score first (duplicates possible).

    Rows B*n_best decode in one batch on the cached decoder, like greedy; finished rows leave the
    batch. Randomness comes only from `sample_uniforms(seed, (sentence id, sample))`, with
    `sentence_ids` (B ints, default 0..B-1) naming each sentence, e.g. its input line: the same
    seed and ids give the same samples whatever the batching. A hypothesis' `log_prob` is the
    model's own (unfiltered, untempered) log-probability of the sample, the value forced decoding
    gives; `score` divides it by the length penalty as beam search does. Every step obeys
    mt.decode.rules before filtering (with the loop guard on, `log_prob` is the guarded values').
    `on_done(b, samples)` is called for sentence b as soon as its last sample ends, with what the
    returned list will hold for it.
    """
    sampling, n_samples = settings.sampling, settings.n_best
    if sampling is None:
        raise ValueError("sample_search: settings.sampling is None (a search, not a draw)")
    batch = src.size(0)
    ids = list(range(batch)) if sentence_ids is None else list(sentence_ids)
    if len(ids) != batch:
        raise ValueError(f"sample_search: {len(ids)} sentence ids for {batch} sentences")
    if batch == 0:
        return []
    device = src.device
    max_lens = max_output_lengths(src_mask.sum(dim=1), settings)
    width = int(max_lens.max().item()) + 1
    keys = [(sid, j) for sid in ids for j in range(n_samples)]  # rows sentence-major
    uniforms = sample_uniforms(sampling.seed, keys, width).to(device)  # (R, width)
    expand = torch.arange(batch, device=device).repeat_interleave(n_samples)  # (R,)
    memory = model.encode(src, src_mask).index_select(0, expand)  # (R, S, D)
    src_mask, max_lens = src_mask.index_select(0, expand), max_lens.index_select(0, expand)
    total = batch * n_samples
    out = torch.full((total, width), PAD_ID, dtype=torch.long, device=device)
    log_prob = torch.zeros(total, dtype=torch.float64, device=device)  # (R,) model log-prob so far
    live = LiveRows(torch.arange(total, device=device), max_lens, memory, src_mask, out)
    tokens = torch.full((total, 1), BOS_ID, dtype=torch.long, device=device)
    handed: dict[int, list[Hypothesis]] = {}  # sentences given to on_done, by index
    rows_left = [n_samples] * batch  # per sentence: samples still being drawn
    while live.rows.numel() > 0:
        log_probs, live.cache = model.decode_step(tokens, live.memory, live.src_mask, live.cache)  # (R', V)
        log_probs = apply_rules(log_probs.float(), settings, at_max=live.at_max_length(),
                                history=live.history)
        next_tok = draw_tokens(filter_log_probs(log_probs, sampling), uniforms[live.rows, live.step])  # (R',)
        out[live.rows, live.step] = next_tok
        log_prob[live.rows] += log_probs.gather(1, next_tok.unsqueeze(1)).squeeze(1).double()
        if on_done is not None:
            for row in live.rows[next_tok == EOS_ID].tolist():
                b = row // n_samples
                rows_left[b] -= 1
                if rows_left[b] == 0:
                    mine = slice(b * n_samples, (b + 1) * n_samples)
                    handed[b] = _samples_of(out[mine].tolist(), log_prob[mine].tolist(), settings)
                    on_done(b, handed[b])
        live.step += 1
        tokens = live.drop_finished(next_tok).unsqueeze(1)
    rows, values = out.tolist(), log_prob.tolist()  # one transfer, not one per row
    mine = [slice(b * n_samples, (b + 1) * n_samples) for b in range(batch)]
    return [handed[b] if b in handed else _samples_of(rows[mine[b]], values[mine[b]], settings)
            for b in range(batch)]
