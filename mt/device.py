"""Which device a command runs on, whether it computes bf16 natively, and what CPU this is.

Used by training (`train.device`, `train.precision: auto`), translation (`--device`,
`--precision bf16`), the export's int8 check and the benchmarks, so the answer is the same everywhere.
`bf16_feature` is the ONE native-bf16 check ("AMX", "AVX-512 BF16", "CUDA bf16", or None where bf16
is emulated); `prefers_onednn_linear` is the ONE routing rule between MKL and oneDNN (float32 on a
non-Intel CPU, where MKL picks slow kernels at mt's shapes), asked by the training loss and the
decoder's output projection; `cpu_name` / `cpu_isa` name the CPU beside published figures.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

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


@functools.cache
def _cpuinfo_fields() -> dict[str, str]:
    """The fields of the first CPU in /proc/cpuinfo ("model name", "flags", "vendor_id", ...); {} where
    there is none. Read once per process: the trainer asks for the vendor on every update (mt.train.loss)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, flags) of the first CPU in /proc/cpuinfo; ("", set()) where there is none."""
    fields = _cpuinfo_fields()
    return fields.get("model name", ""), set(fields.get("flags", "").split())


def cpu_vendor() -> str:
    """The CPU vendor string ('GenuineIntel', 'AuthenticAMD', ...); '' where /proc/cpuinfo has none.

    Intel's MKL picks its fastest kernels by vendor, so some matrix products are routed by it
    (`prefers_onednn_linear`)."""
    return _cpuinfo_fields().get("vendor_id", "")


@functools.cache
def onednn_linear_available() -> bool:
    """Whether this torch build has oneDNN's packed linear (internal ops; absent in some builds)."""
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise"))


def prefers_onednn_linear(weight: torch.Tensor) -> bool:
    """Whether products with this weight (V, D) run faster as oneDNN's packed linear than as a
    plain product: float32 on a CPU whose vendor is not Intel, where MKL's vendor-picked kernels
    are slow at these shapes (mt.train.loss for training, mt.model.decoder_cache for decoding;
    docs/performance.md), with a torch that has the ops."""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu" and onednn_linear_available()
            and cpu_vendor() not in ("GenuineIntel", ""))


def cpu_name() -> str:
    """'AMD EPYC x2': the CPU model and the cores this process may use, for every published figure."""
    name, _ = _cpuinfo()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name or 'unknown CPU'} x{cores}"


def cpu_isa() -> str:
    """The widest vector extension int8 kernels can use here: 'AVX-512 VNNI', 'AVX-512', 'AVX2' or
    'older'; CT2_FORCE_CPU_ISA and ONEDNN_MAX_CPU_ISA, when set, are named too (they cap what
    CTranslate2 and its oneDNN GEMMs use)."""
    _, flags = _cpuinfo()
    isa = ("AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "older")
    caps = [f"{var}={os.environ[var]}" for var in ("CT2_FORCE_CPU_ISA", "ONEDNN_MAX_CPU_ISA")
            if os.environ.get(var)]
    return f"{isa} ({', '.join(caps)})" if caps else isa
