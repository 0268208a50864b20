"""mt.data.batching: collate layout and masks, the token-budget sampler, DDP shards, decode batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mt.data.batching import TokenBatchSampler, collate, collate_source, decode_batches
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.errors import MTError


def lengths(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Multi30k-like subword lengths: source ~13 +- 4, target ~15 +- 5, a few long outliers."""
    rng = np.random.default_rng(seed)
    src = np.clip(rng.normal(13, 4, n), 1, None).astype(np.int64)
    tgt = np.clip(rng.normal(15, 5, n), 0, None).astype(np.int64)
    src[:5] = [60, 80, 100, 2, 0]
    return src, tgt


def cost(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    return len(batch) * (int(src[batch].max()) + 1 + int(tgt[batch].max()) + 1)


def test_collate_golden_example() -> None:
    b = collate([np.array([11, 12, 13], np.int32), np.array([], np.int32)],
                [np.array([21], np.int32), np.array([31, 32, 33], np.int32)], [7, 2])
    P, B, E = PAD_ID, BOS_ID, EOS_ID
    assert b.src.tolist() == [[11, 12, 13, E], [E, P, P, P]]
    assert b.src_mask.tolist() == [[True] * 4, [True, False, False, False]]
    assert b.tgt_in.tolist() == [[B, 21, P, P], [B, 31, 32, 33]]
    assert b.tgt_out.tolist() == [[21, E, P, P], [31, 32, 33, E]]
    assert b.tgt_mask.tolist() == [[True, True, False, False], [True] * 4]
    assert b.indices.tolist() == [7, 2] and b.num_tgt_tokens == 6
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == b.indices.dtype == torch.long
    assert b.src_mask.dtype == b.tgt_mask.dtype == torch.bool
    moved = b.to("cpu")
    assert torch.equal(moved.tgt_out, b.tgt_out) and moved.num_tgt_tokens == 6


def test_collate_source_matches_collate_and_rejects_empty_batches() -> None:
    seqs = [[5, 6], [7, 8, 9, 10]]
    src, mask = collate_source(seqs)
    b = collate([np.array(s) for s in seqs], [np.array([4]), np.array([4])], [0, 1])
    assert torch.equal(src, b.src) and torch.equal(mask, b.src_mask)
    assert torch.equal(mask, src != PAD_ID)
    with pytest.raises(MTError):
        collate_source([])


def test_every_sentence_once_and_budgets_respected() -> None:
    src, tgt = lengths()
    max_tokens, max_sentences = 600, 24
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, max_sentences=max_sentences, seed=3)
    batches = sampler.epoch_batches(0)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(len(src)))  # each sentence exactly once
    for b in batches:
        assert 1 <= len(b) <= max_sentences
        assert cost(b, src, tgt) <= max_tokens or len(b) == 1  # an over-long pair sits alone
    # Padding stays low: length bucketing packs sentences of near-equal lengths.
    real = (src + 1).sum() + (tgt + 1).sum()
    padded = sum(cost(b, src, tgt) for b in batches)
    assert real / padded > 0.9


def test_collate_pads_widths_to_a_multiple() -> None:
    b = collate([np.array([11, 12, 13], np.int32), np.array([], np.int32)],
                [np.array([21], np.int32), np.array([31, 32, 33, 34, 35], np.int32)], [7, 2], multiple=4)
    P, B, E = PAD_ID, BOS_ID, EOS_ID
    assert b.src.tolist() == [[11, 12, 13, E], [E, P, P, P]]  # 4 = already a multiple
    assert b.tgt_in.tolist() == [[B, 21, P, P, P, P, P, P], [B, 31, 32, 33, 34, 35, P, P]]  # 6 -> 8
    assert b.tgt_out.tolist() == [[21, E, P, P, P, P, P, P], [31, 32, 33, 34, 35, E, P, P]]
    assert torch.equal(b.tgt_mask, b.tgt_in != PAD_ID) and torch.equal(b.src_mask, b.src != PAD_ID)
    assert b.num_tgt_tokens == 8  # padding columns are not counted
    unpadded = collate([np.array([11, 12, 13]), np.array([])], [np.array([21]), np.array([31, 32, 33, 34, 35])], [7, 2])
    assert torch.equal(b.tgt_out[:, :6], unpadded.tgt_out)


def test_pad_multiple_bounds_the_batch_shapes() -> None:
    """Padded widths: every sentence once, budgets kept on padded widths, and far fewer distinct
    (B, S, T) shapes over several epochs than unpadded batches have."""
    src, tgt = lengths(20000)
    max_tokens = 2000

    def shapes(multiple: int) -> set[tuple[int, int, int]]:
        sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, max_sentences=512, seed=3,
                                    pad_multiple=multiple)
        seen = set()
        for epoch in range(3):
            batches = sampler.epoch_batches(epoch)
            assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(src)))
            for b in batches:
                s = -(-(int(src[b].max()) + 1) // multiple) * multiple
                t = -(-(int(tgt[b].max()) + 1) // multiple) * multiple
                assert len(b) * (s + t) <= max_tokens or len(b) == 1
                seen.add((len(b), s, t))
        return seen

    padded, natural = shapes(8), shapes(1)
    assert len(padded) * 4 < len(natural)


def test_single_over_long_pair_gets_its_own_batch() -> None:
    src = np.array([3, 4, 500, 5])
    tgt = np.array([3, 4, 400, 5])
    batches = TokenBatchSampler(src, tgt, max_tokens=100, max_sentences=10, seed=0).epoch_batches(0)
    alone = [b for b in batches if 2 in b]
    assert len(alone) == 1 and alone[0].tolist() == [2]
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 2, 3]


def test_deterministic_per_epoch_and_reshuffled_across_epochs() -> None:
    src, tgt = lengths()
    make = lambda seed: TokenBatchSampler(src, tgt, max_tokens=600, max_sentences=64, seed=seed)  # noqa: E731
    a, b = make(1).epoch_batches(5), make(1).epoch_batches(5)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    other_epoch, other_seed = make(1).epoch_batches(6), make(2).epoch_batches(5)
    for other in (other_epoch, other_seed):
        same = sum(np.array_equal(x, y) for x, y in zip(a, other))
        assert same < len(a) // 10


def test_resume_from_k_gives_the_remaining_batches() -> None:
    src, tgt = lengths()
    k = 7
    full = TokenBatchSampler(src, tgt, max_tokens=600, max_sentences=64, seed=1).epoch_batches(2)
    # A restarted process builds a fresh sampler and skips the k batches it already trained on.
    resumed = TokenBatchSampler(src, tgt, max_tokens=600, max_sentences=64, seed=1).epoch_batches(2)[k:]
    assert len(resumed) == len(full) - k
    assert all(np.array_equal(x, y) for x, y in zip(full[k:], resumed))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_shards_disjoint_equal_and_covering(world_size: int) -> None:
    src, tgt = lengths()
    kw = dict(max_tokens=600, max_sentences=64, seed=4)
    everything = TokenBatchSampler(src, tgt, **kw).epoch_batches(1)
    shards = [TokenBatchSampler(src, tgt, **kw, rank=r, world_size=world_size).epoch_batches(1)
              for r in range(world_size)]
    per_rank = len(everything) // world_size
    assert all(len(s) == per_rank for s in shards)
    seen = np.concatenate([np.concatenate(s) for s in shards])
    assert len(np.unique(seen)) == len(seen)  # disjoint
    # Together the ranks cover exactly the first per_rank * world_size batches of the epoch.
    kept = np.concatenate(everything[:per_rank * world_size])
    assert np.array_equal(np.sort(seen), np.sort(kept))


def test_ddp_with_too_few_batches_is_an_error() -> None:
    sampler = TokenBatchSampler(np.array([3]), np.array([3]), max_tokens=100, max_sentences=8, seed=0,
                                rank=0, world_size=2)
    with pytest.raises(MTError, match="batches"):
        sampler.epoch_batches(0)


def test_decode_batches_cover_every_index_once() -> None:
    src, _ = lengths(500)
    batches = decode_batches(src, max_tokens=200, max_sentences=16)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(len(src)))
    for b in batches:
        assert len(b) <= 16 and (len(b) * (int(src[b].max()) + 1) <= 200 or len(b) == 1)
    assert np.all(np.diff(src[flat]) <= 0)  # longest first
