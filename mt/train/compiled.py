"""How the training step runs on this device: compiled or eager, how many batch shapes, where
batches are collated, CUDA graphs, the attention kernel (issue 63; docs/performance.md).

A GPU step is fast when (1) the host never waits for the device inside an update
(mt/train/step.py), (2) the step is compiled and sees few shapes, so each is compiled once and
then replayed (`train.compile`, `train.max_shapes`: a grid of batch shapes,
`mt.data.batching.TokenBatchSampler`), (3) attention reaches the fused kernels without dense
masks (`Transformer.attention_kernel` "flex"), and (4) batches are collated and pinned by a
worker while the device computes (`train.data_workers`, mt/train/feed.py). The CPU keeps its
measured eager path: `auto` switches all of this on for CUDA only.

`train.cuda_graphs` replays the compiled forward and backward as CUDA graphs
(`torch.compile(mode="reduce-overhead")`). A graph replays fixed shapes and fixed memory, so it
is refused, in one line naming what is missing, unless the device is CUDA, the step is compiled,
batch shapes are bounded and one process trains (DDP's bucketed all-reduce inside a captured
backward is not supported here); with it the fused AdamW is made capturable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mt.config import ModelConfig, TrainConfig
from mt.errors import MTError

BACKEND = "inductor"  # torch.compile's backend for the step (a test uses aot_eager: no C++ build)
AUTO_SHAPES = 32  # train.max_shapes auto when compiled: Multi30k at max_tokens 2000 -> 31 shapes, 16% padding


@dataclass(frozen=True)
class StepPlan:
    """train.compile / max_shapes / data_workers / cuda_graphs resolved for one device."""

    compile: bool
    max_shapes: int  # 0: batches as packed (today's shapes)
    workers: int  # DataLoader worker processes; 0: collate in the loop
    cuda_graphs: bool
    flex: bool  # encoder and cross-attention key padding through FlexAttention block masks

    def describe(self) -> str:
        """One line for the training log."""
        shapes = (f"at most {self.max_shapes} batch shapes per epoch" if self.max_shapes
                  else "batches as packed")
        return (f"step: {'compiled' if self.compile else 'eager'}"
                f"{' + CUDA graphs' if self.cuda_graphs else ''}, {shapes}, "
                f"{f'{self.workers} data worker(s)' if self.workers else 'batches collated in the loop'}, "
                f"attention {'flex block masks' if self.flex else 'sdpa'}")


def plan_step(t: TrainConfig, model: ModelConfig, device: torch.device, world_size: int) -> StepPlan:
    """The step's plan for `device`; an MTError when train.cuda_graphs cannot hold here."""
    cuda = device.type == "cuda"
    compiled = t.compile == "on" or (t.compile == "auto" and cuda)
    shapes = t.max_shapes or (AUTO_SHAPES if compiled else 0)
    workers = t.data_workers if t.data_workers >= 0 else (1 if cuda else 0)
    if t.cuda_graphs:
        missing = [why for why, ok in (("a CUDA device", cuda), ("train.compile on", compiled),
                                       ("bounded batch shapes (train.max_shapes)", shapes > 0),
                                       ("one process (no DDP)", world_size == 1),
                                       ("precision other than fp16", t.precision != "fp16")) if not ok]
        if missing:
            raise MTError(f"config key 'train.cuda_graphs': needs {', '.join(missing)}; "
                          f"here device {device}, compile {t.compile}, {world_size} process(es)")
    flex = compiled and cuda and model.attention_dropout == 0  # FlexAttention has no attention dropout
    return StepPlan(compiled, shapes, workers, t.cuda_graphs, flex)


def compile_forward(module: torch.nn.Module, plan: StepPlan,
                    backend: str | Callable = BACKEND) -> torch.nn.Module:
    """`module` (the model, or its DDP wrapper) compiled for the plan: static shapes (one graph per
    grid shape, never a dynamic one), room for every shape of the grid before dynamo gives up."""
    if not plan.compile:
        return module
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, plan.max_shapes + 8)
    mode = "reduce-overhead" if plan.cuda_graphs and backend == "inductor" else None
    return torch.compile(module, dynamic=False, backend=backend, mode=mode)
