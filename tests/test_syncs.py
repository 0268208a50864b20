"""No host synchronisation inside a training update (issue 63).

On a GPU every read of a device value by the host (`.item()`, `.tolist()`, a `nonzero` or
`masked_select` whose output size depends on the data, `unique`) waits until the device has
finished all the work queued before it, so the host cannot queue the next update while the GPU
computes this one. The CPU has no such wait, but the same calls are there or not: a
`TorchDispatchMode` sees them. The run below is the real trainer (`mt.train.loop.train`, what
`mt train` calls) for 60 updates with a log line every 20 and one validation, and every such
call is charged to the phase it happens in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from test_train import copy_run
from torch.utils._python_dispatch import TorchDispatchMode

import mt.train.loop
from mt.config import Config
from mt.train.loop import train

# aten ops that read device data on the host (a sync on CUDA); unique in all its spellings
SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
            "unique_consecutive"}
# the trainer's allowed reads: a log line (_read), validation, checkpoints
ALLOWED = ("_read", "_validate_and_save", "_save_last", "_save_periodic")


class SyncCounter(TorchDispatchMode):
    """Counts host reads by the phase the innermost watched method of the loop is in."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[str] = ["setup"]
        self.reads: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.overloadpacket.__name__ in SYNC_OPS:
            self.reads[self.phases[-1]] += 1
        return func(*args, **(kwargs or {}))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.phases.append(name)
        self.calls[name] += 1
        try:
            yield
        finally:
            self.phases.pop()

    def watch(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        real = getattr(owner, name)

        def watched(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)


def run_counted(cfg: Config, monkeypatch: pytest.MonkeyPatch, sabotage: Callable[[], None] | None = None) -> SyncCounter:
    counter = SyncCounter()
    for name in ("_one_update", *ALLOWED):
        counter.watch(monkeypatch, mt.train.loop._Loop, name)
    real_tolist, real_numpy = torch.Tensor.tolist, torch.Tensor.numpy

    def tolist(self: torch.Tensor) -> Any:  # no aten op: a host copy, counted as a read
        counter.reads[counter.phases[-1]] += 1
        return real_tolist(self)

    def numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        counter.reads[counter.phases[-1]] += 1
        return real_numpy(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    monkeypatch.setattr(torch.Tensor, "numpy", numpy)
    if sabotage is not None:
        sabotage()
    with counter:
        train(cfg)
    return counter


def sync_config(tiny_run: Config, root: Path) -> Config:
    return copy_run(tiny_run, root, max_updates=60, log_every=20, valid_every=60, valid_bleu=True,
                    valid_max_sentences=8, valid_epoch_end=False, save_every=0, keep_checkpoints=1, threads=1,
                    precision="fp32", max_tokens=768,
                    ema_decay=0.99, max_epochs=0)


def test_no_host_read_inside_an_update(tmp_path: Path, tiny_run: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 updates: no read inside any of them; one read per log line (3) and per checkpoint; the
    validation reads as it likes (decoding). The closing validation is the one at update 60."""
    counter = run_counted(sync_config(tiny_run, tmp_path), monkeypatch)
    assert counter.calls["_one_update"] == 60
    assert counter.calls["_validate_and_save"] == 1
    assert counter.reads["_one_update"] == 0, counter.reads
    # one read per call of _read: the 3 log lines, the checks before validating and writing update_60.pt, last.pt
    assert counter.reads["_read"] == counter.calls["_read"] == 3 + 3, (counter.reads, counter.calls)
    assert counter.reads["_validate_and_save"] > 0  # the counter sees what a validation reads


@pytest.mark.parametrize("where", ["item_in_loop", "nonzero_in_loss"])
def test_a_sync_put_back_is_caught(where: str, tmp_path: Path, tiny_run: Config,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself: a float() of the loss per update, or the loss finding its real targets
    with nonzero again, shows up inside the update."""
    import mt.train.step

    def sabotage() -> None:
        if where == "item_in_loop":
            real_step = mt.train.step.UpdateStep.__call__

            def step(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = real_step(self, *args, **kwargs)
                float(result.loss)
                return result
            monkeypatch.setattr(mt.train.step.UpdateStep, "__call__", step)
        else:
            real_loss = mt.train.step.projected_smoothed_nll
            monkeypatch.setattr(mt.train.step, "projected_smoothed_nll",
                                lambda *a, real=None: real_loss(*a, real=None))

    cfg = copy_run(tiny_run, tmp_path, max_updates=3, log_every=20, valid_every=0, valid_bleu=False,
                   save_every=0, keep_checkpoints=1, threads=1, precision="fp32")
    counter = run_counted(cfg, monkeypatch, sabotage)
    assert counter.reads["_one_update"] == 3
