"""Training precision: what `train.precision: auto` means on the machine at hand.

CPUs differ: on AVX2-only CPUs bf16 matrix products are emulated and run ~100x slower than fp32,
while CPUs with AVX-512 BF16 or AMX run them several times faster than fp32. `auto` therefore
picks bf16 autocast only when the CPU reports native bf16 AND a quick timed matrix product
(well under a second at start-up) confirms that bf16 is at least `MIN_MATMUL_SPEEDUP` times
faster than fp32 here; fp32 otherwise. On CUDA it picks bf16 where the GPU supports it. The
choice comes with a one-line reason for the training log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

# A training step is not only matrix products (casts, softmax, LayerNorm, the optimizer stay as
# they are), so bf16 must win clearly on the matmuls before it is chosen.
MIN_MATMUL_SPEEDUP = 2.0


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision training runs in and why."""

    precision: str  # fp32 | bf16 | fp16
    reason: str


def cpu_bf16_feature() -> str | None:
    """The CPU feature giving native bf16 matrix products ("AMX" or "AVX-512 BF16"), None without one."""
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX-512 BF16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        check = getattr(torch.cpu, probe, None)  # private helpers; absent in some torch builds
        if check is not None and check():
            return name
    return None


def matmul_speedup(n: int = 1024, reps: int = 10) -> float:
    """fp32 time over bf16 time of an n^3 matrix product on the CPU (best of `reps`; > 1: bf16 faster).

    Single timings swing 2x on these machines (best of 3 read 1.6x-3.7x in one process on an AMX
    CPU whose bf16 products run ~4-5x fp32), so the best of 10 (~0.1 s in all) is what is compared."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    pairs = {torch.float32: (a, b), torch.bfloat16: (a.bfloat16(), b.bfloat16())}
    best = {dtype: float("inf") for dtype in pairs}
    for _ in range(2):  # warm-up: kernel selection (oneDNN JIT for bf16), first-touch memory
        for x, y in pairs.values():
            torch.mm(x, y)
    for _ in range(reps):  # interleaved, so a burst of load elsewhere hits both
        for dtype, (x, y) in pairs.items():
            t0 = time.perf_counter()
            torch.mm(x, y)
            best[dtype] = min(best[dtype], time.perf_counter() - t0)
    return best[torch.float32] / best[torch.bfloat16]


def resolve_precision(requested: str, device: torch.device) -> PrecisionChoice:
    """`requested` (auto | fp32 | bf16 | fp16) -> the precision to train in on `device`, with the reason."""
    if requested != "auto":
        return PrecisionChoice(requested, "set by train.precision")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return PrecisionChoice("bf16", "auto: the CUDA device supports bf16")
        return PrecisionChoice("fp32", "auto: the CUDA device has no bf16 support")
    if device.type != "cpu":
        return PrecisionChoice("fp32", f"auto: no bf16 check for {device.type} devices")
    feature = cpu_bf16_feature()
    if feature is None:
        return PrecisionChoice("fp32", "auto: this CPU has no native bf16 (neither AVX-512 BF16 nor AMX), "
                                       "so bf16 matrix products would be emulated and far slower")
    speedup = matmul_speedup()
    if speedup < MIN_MATMUL_SPEEDUP:
        return PrecisionChoice("fp32", f"auto: the CPU has {feature}, but a bf16 matrix product ran only "
                                       f"{speedup:.1f}x as fast as fp32 here (bf16 needs {MIN_MATMUL_SPEEDUP:.1f}x)")
    return PrecisionChoice("bf16", f"auto: the CPU has {feature} and a bf16 matrix product ran {speedup:.1f}x "
                                   "as fast as fp32 here")
