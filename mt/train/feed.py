"""Collated batches for the update loop, built ahead of the step (issue 63).

`epoch_feed(epoch, start, ...)` yields the epoch's batches from position `start` on, collated
(`mt.data.batching.collate`, to the batch's grid shape when the sampler has one). With
`workers` > 0 a `torch.utils.data.DataLoader` over the batch list does it in worker processes
(forked: the memory-mapped split is shared) and, for CUDA, pins them in a thread, so that the
step's `to(device, non_blocking=True)` copy overlaps the device's work and the host spends no
step time collating. With 0 workers the loop collates each batch when it needs it (the CPU's
measured path: a worker would take a core from the step).

The DataLoader gets a generator of its own, so starting one never draws from torch's global RNG:
dropout streams, and so bit-identical resume, do not depend on where a run was resumed. Workers
ignore SIGINT and SIGTERM (a Ctrl-C reaches the whole process group): the trainer finishes its
update and saves (mt/train/loop.py), and the loader ends its workers when it is closed or the
trainer exits.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from mt.data.batching import Batch, TokenBatchSampler, collate
from mt.data.splits import EncodedSplit

PREFETCH = 4  # batches each worker keeps ready


class _Batches(Dataset):
    """Item i: batch i of the epoch, collated."""

    def __init__(self, split: EncodedSplit, batches: list[np.ndarray], sampler: TokenBatchSampler | None,
                 multiple: int) -> None:
        self.split, self.batches, self.sampler, self.multiple = split, batches, sampler, multiple

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        idx = self.batches[i]
        shape = self.sampler.shape_of(idx) if self.sampler is not None else None
        return collate([self.split.src[j] for j in idx], [self.split.tgt[j] for j in idx], idx, self.multiple,
                       shape)


def _ignore_signals(worker_id: int) -> None:
    """A worker's start: leave SIGINT/SIGTERM to the trainer (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def epoch_feed(split: EncodedSplit, batches: list[np.ndarray], sampler: TokenBatchSampler | None,
               start: int, *, multiple: int, workers: int, pin: bool) -> Iterator[Batch]:
    """The collated batches `batches[start:]` in order (see the module docstring); `sampler` gives
    each batch its grid shape (None: as packed)."""
    data = _Batches(split, batches, sampler, multiple)
    if workers <= 0:
        for i in range(start, len(data)):
            yield data[i].pin_memory() if pin else data[i]
        return
    loader = DataLoader(data, batch_size=None, sampler=range(start, len(data)), num_workers=workers,
                        pin_memory=pin, prefetch_factor=PREFETCH, generator=torch.Generator(),
                        multiprocessing_context="fork", worker_init_fn=_ignore_signals)
    yield from loader
