"""Optimizer and learning-rate schedule of the trainer (the loss is mt.train.loss).

Learning rate: `Schedule.lr(step, progress)` is a pure function of the 1-based update number and
of the training progress in [0, 1] (see `training_progress`). Base shapes:

- inverse_sqrt: lr · step / warmup during warmup, then lr · sqrt(warmup / step)
- noam:         lr · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)   (lr is a scale factor)
- linear_decay: lr · min(step / warmup, 1 - progress)                   (to 0 at the horizon)
- constant:     lr · min(step / warmup, 1)

When training has a horizon (max_updates, max_epochs or a time budget), the non-linear_decay
shapes are multiplied by a cooldown factor that decays linearly from 1 to `floor` over the last
`train.cooldown` fraction of progress (0.2 by default, 0 = off; a warmup-stable-decay ending): a
run cut by its time budget ends with a finished, annealed model instead of one stopped at a high
learning rate. Progress is the furthest of step/max_updates, elapsed/budget and
step/(max_epochs · updates per epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mt.config import TrainConfig

COOLDOWN = TrainConfig.cooldown  # fraction of the horizon over which the learning rate anneals to the floor
FLOOR = 0.0  # learning rate at the horizon, as a fraction of the base schedule's value there


def build_optimizer(model: torch.nn.Module, train: TrainConfig,
                    capturable: bool = False) -> torch.optim.Optimizer:
    """Adam or AdamW, fused; weight decay only on matrices (not on biases or LayerNorm gains).
    `capturable` (CUDA graphs): the step count stays on the device, so a graph may replay the step."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():  # shared (tied) parameters appear once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # fused kernels exist for CPU and CUDA in torch >= 2.4 and are the fastest step
    if train.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=train.lr, betas=train.betas, eps=train.eps, fused=True,
                                 capturable=capturable)
    return torch.optim.Adam(groups, lr=train.lr, betas=train.betas, eps=train.eps, fused=True,
                            capturable=capturable)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def training_progress(
    step: int, elapsed: float, *, max_updates: int, time_budget: float, horizon_updates: int
) -> float:
    """Progress in [0, 1] towards the first limit that ends training; 0 when there is none.

    step: updates done; elapsed: training seconds so far; max_updates / time_budget (seconds):
    0 = unset; horizon_updates: updates implied by max_epochs (0 = unset).
    """
    p = 0.0
    if max_updates > 0:
        p = max(p, step / max_updates)
    if horizon_updates > 0:
        p = max(p, step / horizon_updates)
    if time_budget > 0:
        p = max(p, elapsed / time_budget)
    return min(p, 1.0)


@dataclass(frozen=True)
class Schedule:
    """Learning rate as a pure function of (update number, progress); see the module docstring."""

    kind: str  # inverse_sqrt | noam | linear_decay | constant
    lr: float
    warmup: int
    d_model: int
    has_horizon: bool  # a limit (updates, epochs, time) is known: anneal at the end
    cooldown: float = COOLDOWN
    floor: float = FLOOR

    @classmethod
    def from_config(cls, train: TrainConfig, *, d_model: int, has_horizon: bool,
                    warmup: int | None = None) -> Schedule:
        """warmup: in updates; None = train.warmup, which must then be a number (a share of the run
        is resolved into updates by mt.train.horizon first)."""
        if warmup is None:
            if not isinstance(train.warmup, int):
                raise ValueError(f"train.warmup {train.warmup!r} is a share: resolve it into updates first")
            warmup = train.warmup
        return cls(kind=train.schedule, lr=train.lr, warmup=warmup, d_model=d_model,
                   has_horizon=has_horizon, cooldown=train.cooldown)

    def base(self, step: int, progress: float) -> float:
        """The schedule's shape before the end-of-training cooldown."""
        step = max(step, 1)
        warm = min(step / self.warmup, 1.0) if self.warmup > 0 else 1.0
        if self.kind == "inverse_sqrt":
            if self.warmup <= 0:  # no warmup: decay from the first update
                return self.lr / math.sqrt(step)
            return self.lr * (warm if step < self.warmup else math.sqrt(self.warmup / step))
        if self.kind == "noam":
            w = max(self.warmup, 1)
            return self.lr * self.d_model ** -0.5 * min(step ** -0.5, step * w ** -1.5)
        if self.kind == "linear_decay":
            return self.lr * max(0.0, min(warm, 1.0 - progress))
        return self.lr * warm  # constant

    def lr_at(self, step: int, progress: float) -> float:
        """Learning rate of update `step` (1-based) at training progress `progress` in [0, 1]."""
        base = self.base(step, progress)
        if not self.has_horizon or self.kind == "linear_decay" or self.cooldown <= 0:
            return base
        start = 1.0 - self.cooldown
        if progress <= start:
            return base
        frac = min((progress - start) / self.cooldown, 1.0)  # 0 -> 1 over the cooldown
        return base * (1.0 - frac * (1.0 - self.floor))
