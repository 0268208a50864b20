"""Where a training step's device time goes (used by scripts/bench/bench_model.py --device cuda).

`kernel_profile` runs the step over the batches under torch.profiler and reports, per step:
kernel time by family (matrix products, attention, softmax and loss, normalisation, elementwise,
optimizer, copies, other), kernel launches, and the host gap: wall time in which no kernel ran
(the device waiting for the host: Python, launches, syncs). On a CPU there are no kernels: the
operators' self times stand in for them, so the suite can run it at a tiny size.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

# (family, substrings of kernel or operator names), first match wins
FAMILIES = (
    ("attention", ("flash", "fmha", "attention", "flex", "sdpa")),
    ("matrix products", ("gemm", "cutlass", "matmul", "sm90_xmma", "aten::mm", "aten::addmm", "aten::bmm", "nvjet")),
    ("softmax and loss", ("softmax", "nll", "log_softmax", "cross_entropy", "gather", "scatter")),
    ("normalisation", ("layer_norm", "layernorm")),
    ("optimizer", ("adam", "foreach", "multi_tensor", "norm")),
    ("copies and casts", ("copy", "cast", "memcpy", "memset", "fill")),
    ("elementwise", ("elementwise", "vectorized", "triton_", "unrolled", "dropout", "relu", "add", "mul")),
)


def family(name: str) -> str:
    low = name.lower()
    return next((fam for fam, keys in FAMILIES if any(k in low for k in keys)), "other")


def kernel_profile(step: Callable[[object], None], batches: list, device: torch.device) -> dict:
    """Per-step kernel milliseconds by family, launches per step, host gap (ms and share of the wall)."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for b in batches:
            step(b)
        sync()
    wall = time.perf_counter() - t0
    times: Counter = Counter()
    launches = 0
    for e in prof.events():
        if cuda and e.device_type == torch.autograd.DeviceType.CUDA:
            times[family(e.name)] += e.device_time_total / 1e3  # ms
            launches += 1
        elif not cuda and e.name.startswith("aten::") and e.cpu_parent is None:
            times[family(e.name)] += e.cpu_time_total / 1e3
            launches += 1
    n = max(len(batches), 1)
    busy = sum(times.values())
    return {"kernel_ms_per_step": {k: round(v / n, 3) for k, v in times.most_common()},
            "launches_per_step": round(launches / n, 1), "wall_ms_per_step": round(wall * 1e3 / n, 3),
            "host_gap_ms_per_step": round(max(wall * 1e3 - busy, 0.0) / n, 3),
            "host_gap_share": round(max(1 - busy / (wall * 1e3), 0.0), 4)}


def print_profile(name: str, p: dict) -> None:
    parts = ", ".join(f"{k} {v:.2f}" for k, v in p["kernel_ms_per_step"].items())
    print(f"  {name}: {p['wall_ms_per_step']:.2f} ms/step, {p['launches_per_step']:.0f} launches/step, host gap "
          f"{p['host_gap_ms_per_step']:.2f} ms ({p['host_gap_share']:.0%}); kernel ms/step: {parts}")
