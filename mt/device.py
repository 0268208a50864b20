"""Which device a command runs on, and whether it computes bf16 natively.

Used by training (`train.device`, `train.precision: auto`), translation (`--device`,
`--precision bf16`) and the benchmarks, so the answer is the same everywhere.
"""

from __future__ import annotations

import torch

from mt.errors import MTError


def resolve_device(name: str, *, local_rank: int = 0) -> torch.device:
    """'auto' -> this rank's CUDA device if there is one, else CPU; 'cuda' -> cuda:<local_rank>.

    A device this machine does not have (cuda:7 with two GPUs, mps off macOS, cuda without CUDA)
    is an MTError here, not a RuntimeError at the first tensor moved to it.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise MTError(f"device {name!r}: expected auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise MTError(f"device '{name}': requested but CUDA is not available")
        index = local_rank if device.index is None else device.index
        count = torch.cuda.device_count()
        if index >= count:
            raise MTError(f"device '{name}': no CUDA device {index} on this machine ({count} visible: "
                          f"cuda:0..cuda:{count - 1})")
        return torch.device("cuda", index)
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise MTError(f"device '{name}': requested but MPS (Apple GPU) is not available on this machine")
        return device
    if device.type != "cpu":
        raise MTError(f"device {name!r}: expected auto, cpu, cuda, cuda:N or mps")
    return device


def bf16_feature(device: torch.device | str) -> str | None:
    """What computes bf16 natively on `device`: "AMX" or "AVX-512 BF16" on a CPU, "CUDA bf16" on a
    GPU that supports it; None where bf16 matrix products would be emulated (far slower than fp32)
    or the device type has no check (mps)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return "CUDA bf16" if torch.cuda.is_bf16_supported() else None
    if dev.type != "cpu":
        return None
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX-512 BF16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        check = getattr(torch.cpu, probe, None)  # private helpers; absent in some torch builds
        if check is not None and check():
            return name
    return None
