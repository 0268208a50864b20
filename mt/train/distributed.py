"""torch.distributed for the trainer: process group from torchrun's environment, small collectives.

Under `torchrun --nproc_per_node N -m mt train CONFIG` every process reads RANK, WORLD_SIZE and
LOCAL_RANK from its environment. The backend is picked from the device: NCCL on CUDA, gloo on
CPU. Without torchrun (WORLD_SIZE unset or 1) nothing is initialised and every collective here is
a no-op, so the trainer has one code path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from mt.errors import MTError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """Rank, world size and local rank as torchrun sets them (a single process otherwise)."""
    try:
        return DistInfo(rank=int(os.environ.get("RANK", "0")), world_size=int(os.environ.get("WORLD_SIZE", "1")),
                        local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    except ValueError:
        raise MTError("distributed: RANK, WORLD_SIZE and LOCAL_RANK must be integers") from None


def init(info: DistInfo, device: torch.device) -> None:
    """Join the process group (NCCL for CUDA devices, gloo for CPU); no-op for one process."""
    if not info.enabled or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # generous timeout: rank 0 alone validates and writes checkpoints while the others wait
    dist.init_process_group(backend=backend, timeout=timedelta(minutes=60))


def shutdown(info: DistInfo) -> None:
    """Leave the process group."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum `tensor` over ranks in place (and return it)."""
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """Rank 0's `flag` on every rank (doubles as a barrier)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1 if (flag and info.is_main) else 0], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return bool(t.item())


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """`obj` of every rank, in rank order (on every rank)."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out
