"""torch.distributed for the trainer: process group from torchrun's environment, small collectives.

Under `torchrun --nproc_per_node N -m mt train CONFIG` every process reads RANK, WORLD_SIZE and
LOCAL_RANK from its environment. The backend is picked from the device: NCCL on CUDA, gloo on
CPU. Without torchrun (WORLD_SIZE unset or 1) nothing is initialised and every collective here is
a no-op, so the trainer has one code path.

Every collective here keeps its `Work` handle until `shutdown` (`_finish`). gloo runs a collective
on a worker thread of its own, and that thread drops its reference to the work after the waiting
rank has already gone on; if that is the last reference, the work's tensors are freed there, which
takes the GIL. When a rank had just run its last collective and was already shutting the
interpreter down, taking the GIL ended the thread and the process aborted ("terminate called
without an active exception", SIGABRT, in ~2% of two-rank CPU runs: AsyncAllgatherWork freed in
ProcessGroupGloo::runLoop during Py_FinalizeEx). Holding the handles makes the main thread the one
that frees them, after a barrier and the group's destruction.
"""

from __future__ import annotations

import os
import pickle
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from mt.errors import MTError

# The newest collectives' handles (see the module docstring); older ones were freed long since.
_recent_work: deque[dist.Work] = deque(maxlen=8)
# A gloo group beside NCCL for `host_sum`: host values agreed without touching the GPU's stream.
_host_group: dist.ProcessGroup | None = None


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
        return DistInfo(rank=int(os.environ.get("RANK", "0")),
                        world_size=int(os.environ.get("WORLD_SIZE", "1")),
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
    global _host_group
    _host_group = dist.new_group(backend="gloo") if backend == "nccl" else None


def shutdown(info: DistInfo, *, finished: bool) -> None:
    """Leave the process group. `finished`: every rank got to the end of its work, so all wait for
    each other first (after an error on one rank the others may never arrive: no barrier then)."""
    if not (info.enabled and dist.is_initialized()):
        return
    if finished:
        _finish(dist.barrier(async_op=True))
    global _host_group
    _host_group = None
    dist.destroy_process_group()
    _recent_work.clear()  # the collectives' tensors are freed here, on this thread (module docstring)


def _finish(work: dist.Work | None) -> None:
    """Wait for a collective started with async_op=True and keep its handle (module docstring)."""
    assert work is not None
    work.wait()
    _recent_work.append(work)


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum `tensor` over ranks in place (and return it)."""
    if info.enabled:
        _finish(dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True))
    return tensor


def host_sum(values: list[float], info: DistInfo) -> list[float]:
    """`values` (host numbers) summed over ranks, through gloo on the CPU: the update loop's
    agreement (stop signal, rank 0's clock) never waits for the GPU's queue. One process: `values`."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    _finish(dist.all_reduce(t, op=dist.ReduceOp.SUM, group=_host_group, async_op=True))
    return t.tolist()


def broadcast_flag(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """Rank 0's `flag` on every rank (doubles as a barrier)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1 if (flag and info.is_main) else 0], dtype=torch.int64, device=device)
    _finish(dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True))
    return bool(t.item())


def gather_objects(obj: Any, info: DistInfo, device: torch.device) -> list[Any]:
    """`obj` (picklable) of every rank, in rank order (on every rank). `dist.all_gather_object`'s
    job, with the handles kept (module docstring): the pickles' sizes, then the pickles padded to
    the longest, as uint8 tensors on `device` (the backend's: NCCL gathers CUDA tensors only)."""
    if not info.enabled:
        return [obj]
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    sizes = [torch.empty_like(size) for _ in range(info.world_size)]
    _finish(dist.all_gather(sizes, size, async_op=True))
    lengths = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    gathered = [torch.empty_like(padded) for _ in range(info.world_size)]
    _finish(dist.all_gather(gathered, padded, async_op=True))
    return [pickle.loads(t[:n].cpu().numpy().tobytes()) for t, n in zip(gathered, lengths)]
