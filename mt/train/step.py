"""One training update: forward/backward over its micro-batches, gradient clipping, the optimizer step.

The gradient is the per-target-token mean over the whole update: each micro-batch's summed
label-smoothed loss is multiplied by world_size / (target tokens of the update over all ranks)
before backward, and DDP averages gradients over ranks (synced on the last micro-batch only).
A non-finite loss or gradient norm skips the optimizer step; `mt.train.loop` counts those.

No host synchronisation: nothing in an update reads a tensor back to the host (no `.item()`,
`.tolist()`, `nonzero`, data-dependent branch), so on a GPU the host queues update after update
while the device works. The loss, NLL and gradient norm come back as 0-d device tensors; the
non-finite check is a device flag handed to the fused optimizer as its `found_inf` (the tensor
GradScaler uses), which makes the kernel leave weights, moments and step count untouched, the
same skip the host used to decide. The real target positions the CPU loss gathers come from the
host (`Batch.real_targets`). tests/test_syncs.py counts the reads over a real `mt train` run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.config import TrainConfig
from mt.data.batching import Batch
from mt.model.transformer import Transformer
from mt.train import distributed
from mt.train.distributed import DistInfo
from mt.train.log import PhaseTimer
from mt.train.loss import projected_smoothed_nll


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for forward passes (bf16/fp16), nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def batch_loss(model: Transformer, ddp: torch.nn.Module, batch: Batch,
               label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training loss of one batch: (summed smoothed loss, summed NLL, target tokens), 0-d tensors.

    `ddp` is `model` or its DistributedDataParallel wrapper (forward runs through it, so DDP sees
    it), or either compiled; the output projection is fused into the loss (mt.train.loss). Runs
    under the caller's autocast. The host's real target rows serve the CPU's chunked loss only.
    """
    hidden = ddp(batch.src, batch.src_mask, batch.tgt_in, project=False)  # (B, T, D)
    real = batch.real_targets if hidden.device.type == "cpu" else None
    return projected_smoothed_nll(hidden, *model.output_layer(), batch.tgt_out, label_smoothing, real=real)


@dataclass(frozen=True)
class StepResult:
    """One update's figures, 0-d tensors on the training device (read by the loop once per log line)."""

    loss: Tensor  # summed label-smoothed loss over the update's target tokens, all ranks
    nll: Tensor  # summed NLL, all ranks
    gnorm: Tensor  # gradient norm before clipping
    bad: Tensor  # bool: the loss or gradient was not finite, so the optimizer step was skipped


class UpdateStep:
    """What one update computes: forward/backward over its micro-batches (DDP syncs gradients on
    the last one), gradient clipping and the optimizer step. `mt.train.loop`'s loop decides when and
    with what LR."""

    def __init__(self, *, model: Transformer, ddp: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler | None, t: TrainConfig, info: DistInfo,
                 device: torch.device, timer: PhaseTimer, precision: str,
                 forward: torch.nn.Module | None = None) -> None:
        self.model, self.ddp, self.optimizer, self.scaler = model, ddp, optimizer, scaler
        self.forward = forward if forward is not None else ddp  # `ddp`, or it compiled (mt.train.compiled)
        self.precision = precision  # train.precision resolved: fp32 | bf16 | fp16
        self.t, self.info, self.device, self.timer = t, info, device, timer
        self.params = [p for p in ddp.parameters() if p.requires_grad]  # a DDP wrapper's are its module's

    def __call__(self, batches: list[Batch], *, scale: float) -> StepResult:
        """Run the update over its collated micro-batches (on the host, pinned for CUDA, or on the
        device); each micro-batch's summed loss is multiplied by `scale` before backward.

        Nothing here reads a value back to the host (see the module docstring): the result's
        figures stay on the device until the loop reads them at a log line or a checkpoint.
        """
        loss_acc = torch.zeros((), device=self.device)
        nll_acc = torch.zeros((), device=self.device)
        for i, host_batch in enumerate(batches):
            batch = host_batch.to(self.device, non_blocking=self.device.type == "cuda")
            self.timer.lap("data")
            last = i == len(batches) - 1
            no_sync = self.ddp.no_sync() if (self.info.enabled and not last) else contextlib.nullcontext()
            with no_sync:
                with autocast(self.precision, self.device):
                    loss, nll, _ = batch_loss(self.model, self.forward, batch, self.t.label_smoothing)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss_acc += loss.detach()
            nll_acc += nll
            self.timer.lap("forward_backward")
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        gnorm = torch.nn.utils.get_total_norm(grads)
        if self.t.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.t.clip_norm, gnorm)
        stats = distributed.all_reduce_sum(torch.stack([loss_acc, nll_acc]), self.info)  # on the device
        bad = ~torch.isfinite(stats[0])
        if self.scaler is not None:  # fp16: the scaler's own found_inf skips overflowed steps (not "bad")
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            bad = bad | ~torch.isfinite(gnorm)
            # fused AdamW skips its whole step (weights, moments, step count) where found_inf != 0
            self.optimizer.found_inf = bad.to(torch.float32)  # type: ignore[attr-defined]
            self.optimizer.step()
            self.optimizer.found_inf = None  # type: ignore[attr-defined]
        self.optimizer.zero_grad(set_to_none=True)
        self.timer.lap("optimizer")
        return StepResult(loss=stats[0], nll=stats[1], gnorm=gnorm.detach(), bad=bad)
