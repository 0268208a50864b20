"""What each epoch trains on: the training split (resegmented per epoch with subword
regularisation, `mt.data.resegment`) and this rank's batches of it, with their token counts.

`TrainingData(...).epoch(epoch)` is a pure function of (config, epoch), pair sizes and the
synthetic mix read from the manifest: a resumed run trains on exactly the batches the interrupted
one would have (`--resume` skips the first k of them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mt.config import Config
from mt.data.batching import TokenBatchSampler
from mt.data.resegment import Resegmenter, SamplingSettings
from mt.data.splits import EncodedSplit, prepared_pairs, prepared_synthetic
from mt.data.synthetic import epoch_mix
from mt.data.tokenizer import Tokenizer
from mt.train.distributed import DistInfo


@dataclass(frozen=True)
class Epoch:
    """One epoch's split and this rank's batches of it, in training order."""

    split: EncodedSplit
    batches: list[np.ndarray]  # index arrays into `split`
    src_tokens: np.ndarray  # (len(batches),) float64: source tokens per batch, EOS included
    tgt_tokens: np.ndarray  # (len(batches),) float64: target tokens of the loss per batch, EOS included
    # (len(batches),) float64: the same summed over the ranks' batches at each position; every rank
    # knows every rank's batches (a pure function of config and epoch), so no collective is needed
    global_src: np.ndarray
    global_tgt: np.ndarray
    sampler: TokenBatchSampler  # its shape_of(batch): the batch's grid shape (None without train.max_shapes)


class TrainingData:
    """The training split and its batch plan, epoch by epoch; a pure function of (config, epoch)."""

    def __init__(self, cfg: Config, run_dir: Path, split: EncodedSplit, tokenizer: Tokenizer, info: DistInfo,
                 report: Callable[[str], None], max_shapes: int = 0) -> None:
        t, tok = cfg.train, cfg.tokenizer
        self.cfg, self.split, self.info, self.report = cfg, split, info, report
        self.max_shapes = max_shapes  # train.max_shapes resolved (mt.train.compiled.plan_step)
        self.pair_sizes = [p["train_sentences"] for p in prepared_pairs(run_dir)]
        self.pair_counts: list[int] = []
        synthetic = prepared_synthetic(run_dir)
        if synthetic is not None:  # real pairs, then the synthetic block, mixed by data.synthetic_ratio
            mix = epoch_mix(self.pair_sizes, synthetic["sentences"], cfg.data.synthetic_ratio,
                            synthetic["tag"] is not None)
            self.pair_sizes, self.pair_counts = mix.sizes, mix.counts
            report(mix.describe())
        self.resegmenter: Resegmenter | None = None
        if tok.sampling_alpha > 0:
            limit = cfg.model.max_positions - 1  # + EOS (source) or BOS (target) must fit
            if cfg.data.max_len > 0:
                limit = min(limit, cfg.data.max_len)
            start = time.perf_counter()
            self.resegmenter = Resegmenter(split, tokenizer, SamplingSettings(
                alpha=tok.sampling_alpha, nbest=tok.sampling_nbest, max_len=limit, seed=t.seed))
            report(f"subword regularisation: {tok.type} sampling, alpha {tok.sampling_alpha:g}"
                   f"{f', nbest {tok.sampling_nbest}' if tok.type == 'unigram' else ''}; "
                   f"{100 * self.resegmenter.invertible_fraction():.2f}% of the sequences resampled "
                   f"each epoch "
                   f"(text recovered in {time.perf_counter() - start:.1f}s)")
        self._sampler = None if self.resegmenter else self._make_sampler(split)
        self._last: tuple[int, Epoch] | None = None

    def _make_sampler(self, split: EncodedSplit) -> TokenBatchSampler:
        t = self.cfg.train
        return TokenBatchSampler(split.src.lengths(), split.tgt.lengths(), max_tokens=t.max_tokens,
                                 max_sentences=t.max_sentences, seed=t.seed, rank=self.info.rank,
                                 world_size=self.info.world_size, pad_multiple=t.pad_multiple,
                                 pair_sizes=self.pair_sizes, temperature=self.cfg.data.pair_temperature,
                                 pair_counts=self.pair_counts, max_shapes=self.max_shapes)

    def epoch(self, epoch: int) -> Epoch:
        """Epoch `epoch`'s split and batches (the same object when asked twice in a row)."""
        if self._last is not None and self._last[0] == epoch:
            return self._last[1]
        split, sampler = self.split, self._sampler
        if self.resegmenter is not None:
            start = time.perf_counter()
            segmented = self.resegmenter.epoch(epoch)
            split, sampler = segmented.split, self._make_sampler(segmented.split)
            self.report(f"epoch {epoch}: sampled segmentation in {time.perf_counter() - start:.1f}s, "
                        f"{segmented.tokens_ratio:.3f}x the canonical tokens, "
                        f"{segmented.kept} sequences kept canonical")
        assert sampler is not None
        batches = sampler.epoch_batches(epoch)
        src_len, tgt_len = split.src.lengths() + 1, split.tgt.lengths() + 1  # + EOS
        src_tok, tgt_tok = (np.array([n[b].sum() for b in batches], dtype=np.float64)
                            for n in (src_len, tgt_len))
        global_src, global_tgt = src_tok, tgt_tok
        world = self.info.world_size
        if world > 1:  # position i of every rank: batches i*world .. i*world + world - 1 of the epoch
            every = sampler.all_batches(epoch)[:len(batches) * world]
            global_src, global_tgt = (np.array([n[b].sum() for b in every], dtype=np.float64)
                                      .reshape(len(batches), world).sum(axis=1) for n in (src_len, tgt_len))
        result = Epoch(split, batches, src_tok, tgt_tok, global_src, global_tgt, sampler)
        self._last = (epoch, result)
        return result
