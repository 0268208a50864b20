"""Exponential moving average (EMA) of the weights, `train.ema_decay` (Marian's exponential smoothing).

After every optimizer step the shadow weights move towards the trained ones:

    shadow <- d_t * shadow + (1 - d_t) * weights,   d_t = min(ema_decay, (1 + t) / (10 + t))

at update t. The warm-up form of d_t (as in TensorFlow's ExponentialMovingAverage) keeps the first
updates from being averaged with the random initialisation. Validation, best.pt and the periodic
checkpoints (and so averaged.pt) hold the shadow weights; training continues on the raw ones, and
last.pt keeps both, so --resume continues the average exactly. The shadow is fp32 (like the
trained weights under bf16 autocast) and costs one extra copy of the parameters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class WeightEMA:
    """The shadow weights of `model`'s parameters (tied parameters once, in `parameters()` order)."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def reset(self) -> None:
        """The shadow becomes the current weights (an EMA switched on when resuming)."""
        torch._foreach_copy_(self.shadow, [p.detach() for p in self.params])

    def decay_at(self, update: int) -> float:
        """d_t: the weight of the old shadow at update `update` (1-based)."""
        return min(self.decay, (1.0 + update) / (10.0 + update))

    @torch.no_grad()
    def update(self, update: int) -> None:
        """Fold the weights after optimizer step number `update` into the shadow."""
        torch._foreach_lerp_(self.shadow, [p.detach() for p in self.params], 1.0 - self.decay_at(update))

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the shadow weights inside the block and its own ones again after it."""
        weights = [p.data for p in self.params]
        trained = [w.clone() for w in weights]
        torch._foreach_copy_(weights, self.shadow)
        try:
            yield
        finally:
            torch._foreach_copy_(weights, trained)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "shadow": [s.clone() for s in self.shadow]}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        shadow = state["shadow"]
        if len(shadow) != len(self.shadow) or any(a.shape != b.shape for a, b in zip(shadow, self.shadow)):
            raise ValueError("EMA shadow weights do not match the model's parameters")
        torch._foreach_copy_(self.shadow, [s.to(self.shadow[0].device) for s in shadow])
