"""Batches, padding masks and the length-bucketed token-budget sampler.

This is the only place padding masks are built. Polarity: True = a real token (attend to it),
False = padding, the polarity of `scaled_dot_product_attention` boolean masks. Everything else
derives from these: the model's key-padding masks, search's source lengths (`max_output_lengths`),
the loss's PAD targets; `nn.Transformer` (scripts/bench/bench_model.py's peer) wants the opposite (`~mask`).

Layout of a batch (sequences arrive as token ids without BOS/EOS):
    src     = x + EOS, then PAD        (B, S)   S = max |x| + 1
    tgt_in  = BOS + y, then PAD        (B, T)   T = max |y| + 1
    tgt_out = y + EOS, then PAD        (B, T)
The source ends with EOS so that every source row has at least one real token (no fully
masked attention row, even for an empty line) and the encoder sees where the sentence ends.

`max_tokens` counts padded tensor elements: B * S + B * T = B * (max|x| + 1 + max|y| + 1), the
source and decoder-input tokens the model actually computes on, padding included. A single
sentence pair whose own cost exceeds `max_tokens` still gets a batch, of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.errors import MTError


@dataclass
class Batch:
    """One training batch. `indices` are the sentences' positions in their split."""

    src: Tensor  # (B, S) long: x + EOS, PAD
    src_mask: Tensor  # (B, S) bool, True = real token
    tgt_in: Tensor  # (B, T) long: BOS + y, PAD
    tgt_out: Tensor  # (B, T) long: y + EOS, PAD
    tgt_mask: Tensor  # (B, T) bool, True = a real position of tgt_in / tgt_out
    indices: Tensor  # (B,) long
    num_tgt_tokens: int  # real target tokens (sum of |y| + 1): the loss normaliser
    # (n,) long: the real positions of tgt_out.reshape(-1), found on the host when collating so that
    # the training loss needs no `nonzero` (a device sync on a GPU)
    real_targets: Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy on `device` (non_blocking needs pinned memory to overlap a host-to-GPU copy)."""

        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(move(self.src), move(self.src_mask), move(self.tgt_in), move(self.tgt_out),
                     move(self.tgt_mask), move(self.indices), self.num_tgt_tokens,
                     None if self.real_targets is None else move(self.real_targets))

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory (what a DataLoader with pin_memory=True calls), so that
        `to(cuda, non_blocking=True)` overlaps the copy with the GPU's work."""
        return Batch(self.src.pin_memory(), self.src_mask.pin_memory(), self.tgt_in.pin_memory(),
                     self.tgt_out.pin_memory(), self.tgt_mask.pin_memory(), self.indices.pin_memory(),
                     self.num_tgt_tokens,
                     None if self.real_targets is None else self.real_targets.pin_memory())


def padded_width(width: np.ndarray | int, multiple: int) -> np.ndarray | int:
    """`width` rounded up to a multiple of `multiple` (1 = unchanged)."""
    return -(-width // multiple) * multiple


def _pad(seqs: Sequence[Sequence[int]], prefix: int | None, suffix: int | None,
         multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Rows [prefix] + seq + [suffix], right-padded with PAD to a width that is a multiple of
    `multiple` -> (ids (B, L) int64, mask (B, L) bool)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    extra = (prefix is not None) + (suffix is not None)
    width = int(padded_width(int(lengths.max(initial=0)) + extra, multiple))
    ids = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    start = 1 if prefix is not None else 0
    if prefix is not None:
        ids[:, 0] = prefix
    for row, (seq, n) in enumerate(zip(seqs, lengths)):
        ids[row, start:start + n] = seq
    if suffix is not None:
        ids[np.arange(len(seqs)), start + lengths] = suffix
    mask = np.arange(width)[None, :] < (lengths + extra)[:, None]
    return ids, mask


def collate_source(src_seqs: Sequence[Sequence[int]], multiple: int = 1) -> tuple[Tensor, Tensor]:
    """Source ids without EOS -> (src (B, S) long = x + EOS + PAD, src_mask (B, S) bool), S a
    multiple of `multiple`."""
    if len(src_seqs) == 0:
        raise MTError("batch: no source sentences to collate")
    ids, mask = _pad(src_seqs, None, EOS_ID, multiple)
    return torch.from_numpy(ids), torch.from_numpy(mask)


def collate(src_seqs: Sequence[Sequence[int]], tgt_seqs: Sequence[Sequence[int]],
            indices: Sequence[int] | np.ndarray, multiple: int = 1,
            shape: tuple[int, int, int] | None = None) -> Batch:
    """Pad a list of (source, target) id sequences without BOS/EOS into a `Batch`; S and T are
    rounded up to a multiple of `multiple` (see TokenBatchSampler's `pad_multiple`).

    `shape` (B, S, T): the batch's grid shape (`TokenBatchSampler.shape_of`) instead; rows beyond
    the pairs are empty (source EOS then PAD, so no attention row is fully masked; target all PAD,
    so out of the loss; index -1)."""
    if len(src_seqs) != len(tgt_seqs) or len(src_seqs) != len(indices):
        raise MTError(f"batch: {len(src_seqs)} sources, {len(tgt_seqs)} targets, {len(indices)} indices")
    if shape is not None:
        return _to_shape(collate(src_seqs, tgt_seqs, indices), shape)
    src, src_mask = collate_source(src_seqs, multiple)
    tgt_in, tgt_mask = _pad(tgt_seqs, BOS_ID, None, multiple)
    # tgt_out is tgt_in shifted left by one, with EOS written where BOS + y ends.
    tgt_out = np.full_like(tgt_in, PAD_ID)
    tgt_out[:, :-1] = tgt_in[:, 1:]
    lengths = tgt_mask.sum(axis=1)  # |y| + 1
    tgt_out[np.arange(len(tgt_seqs)), lengths - 1] = EOS_ID
    return Batch(src, src_mask, torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                 torch.from_numpy(tgt_mask),
                 torch.as_tensor(np.asarray(indices, dtype=np.int64)), int(lengths.sum()),
                 torch.from_numpy(np.flatnonzero(tgt_mask)))


def _to_shape(b: Batch, shape: tuple[int, int, int]) -> Batch:
    """`b` padded to shape (B, S, T) with empty rows (see `collate`)."""
    n, (rows, s, t) = b.src.size(0), shape
    if n > rows or b.src.size(1) > s or b.tgt_in.size(1) > t:
        raise MTError(f"batch: {n} pairs of widths {b.src.size(1)}, {b.tgt_in.size(1)} "
                      f"exceed the shape {shape}")

    def grow(x: Tensor, width: int, fill: int | bool) -> Tensor:
        out = torch.full((rows, width), fill, dtype=x.dtype)
        out[:n, :x.size(1)] = x
        return out

    src, src_mask = grow(b.src, s, PAD_ID), grow(b.src_mask, s, False)
    src[n:, 0], src_mask[n:, 0] = EOS_ID, True
    tgt_mask = grow(b.tgt_mask, t, False)
    indices = torch.cat([b.indices, torch.full((rows - n,), -1, dtype=b.indices.dtype)])
    return Batch(src, src_mask, grow(b.tgt_in, t, PAD_ID), grow(b.tgt_out, t, PAD_ID), tgt_mask, indices,
                 b.num_tgt_tokens, torch.from_numpy(np.flatnonzero(tgt_mask.numpy())))


def _pack(src_width: np.ndarray, tgt_width: np.ndarray, max_tokens: int, max_sentences: int) -> list[int]:
    """Greedy packing of consecutive sentences: batch sizes in order.

    A batch of n consecutive sentences costs n * (max src_width + max tgt_width) over its rows.
    One Python iteration per batch (not per sentence): the running maxima make the cost of the
    first n rows nondecreasing in n, so the largest n within budget is a count over a window.
    """
    total, start, sizes = len(src_width), 0, []
    window = max(1, min(max_sentences, max_tokens // 2))  # every pair costs >= 2 (EOS, BOS)
    while start < total:
        stop = min(total, start + window)
        run_src = np.maximum.accumulate(src_width[start:stop])
        run_tgt = np.maximum.accumulate(tgt_width[start:stop])
        cost = np.arange(1, stop - start + 1) * (run_src + run_tgt)
        n = max(1, int(np.count_nonzero(cost <= max_tokens)))  # 1: an over-long pair gets its own batch
        sizes.append(n)
        start += n
    return sizes


def pair_sample_counts(sizes: Sequence[int], temperature: float) -> list[int]:
    """Sentences each pair contributes to one epoch of sum(sizes): proportional to n_i^(1/T)
    (Arivazhagan et al. 2019; T = 1 keeps every pair's own size, larger T flattens towards equal
    shares, upsampling small pairs), rounded by largest remainder so they add up to sum(sizes)."""
    n = np.asarray(sizes, dtype=np.float64)
    if len(n) == 0 or (n <= 0).any() or not temperature > 0:
        raise MTError(f"sampler: pair sizes {list(sizes)} must be positive and temperature > 0, "
                      f"got {temperature}")
    weights = n ** (1.0 / temperature)
    share = weights / weights.sum() * n.sum()  # (P,) exact, fractional
    counts = np.floor(share).astype(np.int64)
    # ties broken by pair order: stable sort of the remainders, largest first
    for i in np.argsort(-(share - counts), kind="stable")[:int(n.sum()) - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


def _buckets(width: np.ndarray, n: int, multiple: int) -> np.ndarray:
    """Each width rounded up to the next of at most n bucket widths (multiples of `multiple`, the
    widest among them), chosen to add the fewest padded positions: dynamic programming over the
    candidate widths, cost(bucket (a, b]) = sum over its widths w of (b - w).  # (N,)"""
    cands = np.arange(multiple, int(padded_width(int(width.max()), multiple)) + 1, multiple)  # (M,)
    slot = np.searchsorted(cands, width)  # (N,) the candidate each width rounds up to
    count = np.concatenate([[0], np.cumsum(np.bincount(slot, minlength=len(cands)))])  # (M + 1,) prefix sums
    total = np.concatenate([[0], np.cumsum(np.bincount(slot, weights=width, minlength=len(cands)))])
    # cost[a, b]: the widths of candidates a..b-1 (0-based, b exclusive) padded to cands[b - 1]
    a, b = np.arange(len(cands) + 1)[:, None], np.arange(len(cands) + 1)[None, :]
    top = cands[np.maximum(b - 1, 0)]
    cost = np.where(a < b, top * (count[b] - count[a]) - (total[b] - total[a]), np.inf)  # (M + 1, M + 1)
    best = np.full(len(cands) + 1, np.inf)
    best[0] = 0.0
    choice = []
    for _ in range(min(n, len(cands))):
        step = best[:, None] + cost  # (M + 1, M + 1): a bucket (a, b] after a best split of the first a
        choice.append(step.argmin(axis=0))
        best = np.minimum(best, step.min(axis=0))  # at most, not exactly, this many buckets
    bounds, end = [], len(cands)  # walk back from the widest candidate
    for back in reversed(choice):
        if end == 0:
            break
        bounds.append(cands[end - 1])
        end = int(back[end])
    bounds = np.array(sorted(set(bounds)))
    return bounds[np.searchsorted(bounds, width)]


def shape_grid(src_width: np.ndarray, tgt_width: np.ndarray, max_shapes: int,
               multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Source and target widths (N,) rounded to a grid with at most `max_shapes` occupied (source,
    target) cells: the most quantile buckets per side (`_buckets`) that keep within the bound."""
    best = _buckets(src_width, 1, multiple), _buckets(tgt_width, 1, multiple)  # one cell: the widest
    for n in range(2, max_shapes + 1):
        grid = _buckets(src_width, n, multiple), _buckets(tgt_width, n, multiple)
        if len(np.unique(grid[0] * (int(grid[1].max()) + 1) + grid[1])) > max_shapes:
            break
        best = grid
    return best


def _split(order: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(order, np.cumsum(sizes)[:-1]) if sizes else []


class TokenBatchSampler:
    """Length-bucketed batches of training pairs under a padded-token budget.

    Per epoch: shuffle the pairs with rng((seed, epoch)), stable-sort them by (source length,
    target length) so equal-length pairs stay in random order, cut the sorted list greedily into
    batches of at most `max_tokens` padded tokens (B * (S + T), see the module docstring) and
    `max_sentences` pairs, then shuffle the order of the batches with the same rng. The list is a
    pure function of (lengths, budgets, seed, epoch): resuming mid-epoch = skipping its first k.

    DDP (world_size > 1): the shuffled batch list is cut to a multiple of world_size by dropping
    its last `len % world_size` batches (different batches every epoch, since the order is
    reshuffled), and rank r takes batches r, r + world_size, ... Ranks thus get disjoint batches,
    the same number each, which keeps their collective calls in step.

    `pad_multiple` > 1 bounds the set of batch shapes: widths (|x| + 1, |y| + 1) are rounded up to
    a multiple of it for sorting and packing (collate with the same `multiple`), so the full
    batches of one (S, T) group all have B = max_tokens // (S + T). Backends that compile a kernel
    per matrix shape (oneDNN's bf16 path on CPU, torch.compile) then see a few dozen shapes
    instead of new ones all run long; the price is the extra padding.

    Several language pairs (`pair_sizes`: the split holds pair 0's n_0 sentences, then pair 1's,
    ...): each epoch first draws the multiset of sentences it trains on, pair i contributing
    m_i = `pair_sample_counts(pair_sizes, temperature)[i]` of them (every one of its sentences
    floor(m_i / n_i) times, plus m_i mod n_i of them drawn without replacement), with the same
    rng((seed, epoch)); that multiset is then shuffled, sorted and packed as above, so batches mix
    pairs, and the batch list stays a pure function of (lengths, budgets, seed, epoch, pair sizes,
    temperature): resume skips batches exactly as in the bilingual case. With one pair (or no
    `pair_sizes`) there is nothing to mix, and the sampler draws exactly what it always did.
    `pair_counts` gives the m_i directly (real and synthetic parts, `mt.data.synthetic.epoch_mix`).

    `max_shapes` K > 0 (a compiled training step: one graph per batch shape) bounds the epoch to at
    most K batch shapes (B, S, T), as fairseq's num_batch_buckets and required_seq_len_multiple do:
    widths are rounded up to a grid of quantile buckets per side (`shape_grid`), each grid cell
    (S, T) is packed on its own, and every batch of a cell has B = min(max_sentences,
    max_tokens // (S + T)) rows, the last one filled with empty rows (`shape_of`, `collate(shape=)`).
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int,
                 max_sentences: int, seed: int, rank: int = 0, world_size: int = 1, pad_multiple: int = 1,
                 pair_sizes: Sequence[int] = (), temperature: float = 1.0, pair_counts: Sequence[int] = (),
                 max_shapes: int = 0) -> None:
        src_lengths, tgt_lengths = np.asarray(src_lengths, np.int64), np.asarray(tgt_lengths, np.int64)
        if src_lengths.shape != tgt_lengths.shape or src_lengths.ndim != 1:
            raise MTError(f"sampler: {src_lengths.shape} source lengths "
                          f"vs {tgt_lengths.shape} target lengths")
        if len(src_lengths) == 0:
            raise MTError("sampler: no training pairs")
        if pad_multiple < 1:
            raise MTError(f"sampler: pad_multiple must be >= 1, got {pad_multiple}")
        if not 0 <= rank < world_size:
            raise MTError(f"sampler: rank {rank} outside world size {world_size}")
        self.src_lengths, self.tgt_lengths = src_lengths, tgt_lengths
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._src_width = padded_width(src_lengths + 1, pad_multiple)  # (N,) EOS included
        self._tgt_width = padded_width(tgt_lengths + 1, pad_multiple)  # (N,) BOS included
        self.max_shapes = max_shapes
        if max_shapes > 0:
            self._src_width, self._tgt_width = shape_grid(src_lengths + 1, tgt_lengths + 1, max_shapes,
                                                          pad_multiple)
        # One int64 sort key: source width major, target width minor.
        self._key = self._src_width * (int(self._tgt_width.max()) + 1) + self._tgt_width
        self.pair_sizes = [int(n) for n in pair_sizes]
        if self.pair_sizes and sum(self.pair_sizes) != len(src_lengths):
            raise MTError(f"sampler: pair sizes {self.pair_sizes} do not add up to "
                          f"the {len(src_lengths)} training pairs")
        # Pairs to mix: several (one pair's epoch is all of it, in the order drawn below).
        self.pair_counts = (pair_sample_counts(self.pair_sizes, temperature) if len(self.pair_sizes) > 1
                            else [])
        if pair_counts:  # drawn as given (real + synthetic data, mt.data.synthetic.epoch_mix)
            if len(pair_counts) != len(self.pair_sizes) or min(pair_counts) < 1:
                raise MTError(f"sampler: counts {list(pair_counts)} do not match the parts {self.pair_sizes}")
            self.pair_counts = [int(m) for m in pair_counts]

    def _epoch_pool(self, rng: np.random.Generator) -> np.ndarray:
        """(sum n_i,) the split indices one multi-pair epoch trains on, pair by pair (see the class
        docstring)."""
        parts, start = [], 0
        for n, m in zip(self.pair_sizes, self.pair_counts):
            repeats, rest = divmod(m, n)
            parts += [np.arange(start, start + n)] * repeats + [start + rng.permutation(n)[:rest]]
            start += n
        return np.concatenate(parts)

    def all_batches(self, epoch: int) -> list[np.ndarray]:
        """Every rank's batches of the epoch, in training order (before DDP sharding)."""
        rng = np.random.default_rng((self.seed, epoch))
        if self.pair_counts:
            pool = self._epoch_pool(rng)
            perm = pool[rng.permutation(len(pool))]
        else:
            perm = rng.permutation(len(self._key))
        order = perm[np.argsort(self._key[perm], kind="stable")]  # (N,) ties in random order
        if self.max_shapes > 0:  # each grid cell packed on its own: a batch never spans two shapes
            cells = np.split(order, np.flatnonzero(np.diff(self._key[order])) + 1)
            batches = [b for c in cells for b in _split(
                c, _pack(self._src_width[c], self._tgt_width[c], self.max_tokens, self.max_sentences))]
        else:
            sizes = _pack(self._src_width[order], self._tgt_width[order], self.max_tokens, self.max_sentences)
            batches = _split(order, sizes)
        return [batches[i] for i in rng.permutation(len(batches))]

    def shape_of(self, batch: np.ndarray) -> tuple[int, int, int] | None:
        """The grid shape (B, S, T) `collate` pads `batch` to; None without `max_shapes` (as packed)."""
        if self.max_shapes <= 0:
            return None
        s, t = int(self._src_width[batch[0]]), int(self._tgt_width[batch[0]])
        return max(1, min(self.max_sentences, self.max_tokens // (s + t))), s, t

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches (index arrays into the split) for `epoch`, in training order."""
        batches = self.all_batches(epoch)
        if self.world_size == 1:
            return batches
        per_rank = len(batches) // self.world_size
        if per_rank == 0:
            raise MTError(f"sampler: {len(batches)} batches cannot feed {self.world_size} ranks; "
                          f"lower train.max_tokens")
        return batches[self.rank:per_rank * self.world_size:self.world_size]


def decode_batches(src_lengths: np.ndarray, *, max_tokens: int, max_sentences: int) -> list[np.ndarray]:
    """Batches of source indices for translation, longest sentences first.

    A batch holds at most `max_sentences` sentences and B * (max|x| + 1) <= max_tokens padded
    source tokens (a longer single sentence gets its own batch). Callers restore input order
    with the indices.
    """
    src_lengths = np.asarray(src_lengths, np.int64)
    order = np.argsort(-src_lengths, kind="stable")  # (N,)
    widths = src_lengths[order] + 1
    sizes = _pack(widths, np.zeros_like(widths), max_tokens, max_sentences)
    return _split(order, sizes)


def pair_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int,
                 max_sentences: int) -> list[np.ndarray]:
    """Batches of pair indices for forced decoding (`mt score`), longest sources first.

    Sorted by (source length, target length), cut greedily so that a batch holds at most
    `max_sentences` pairs and B * (max|x| + 1 + max|y| + 1) <= max_tokens padded tokens (a
    longer single pair gets its own batch). Callers restore input order with the indices.
    """
    src_lengths, tgt_lengths = np.asarray(src_lengths, np.int64), np.asarray(tgt_lengths, np.int64)
    order = np.lexsort((-tgt_lengths, -src_lengths))  # (N,) the last key is the primary one
    sizes = _pack(src_lengths[order] + 1, tgt_lengths[order] + 1, max_tokens, max_sentences)
    return _split(order, sizes)
