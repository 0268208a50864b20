"""Where a training step's time goes, and what its matrix products alone would allow
(used by scripts/bench/bench_model.py --profile).

`profile_parts` runs the step over the batches under torch.profiler and sums each operator's
self time into the parts of a step: matrix products, fused attention (SDPA, fp32), dtype casts,
softmax / log-softmax, LayerNorm, dropout and residual sums, activation, embedding, the
optimizer and clipping, allocation, other elementwise ops. What the operators do not account
for (Python, the autograd engine, the dispatcher, the profiler's own bookkeeping) is the wall
time minus their sum.

`matmul_ceiling` is the measured ceiling of the step's MFU: it records every matrix product of
one pass (operator, shapes, strides, dtypes) and times each one alone, once on operands just
read from memory (a 64 MiB buffer is written between products, as the other operators of a
step evict the caches) and once on operands already in cache. A step made only of its own
products at those speeds would reach (model FLOPs) / (summed product time) / peak: no fusion of
the other operators can take the step past that without making the products themselves faster.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

MATMULS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise")

# Operator (self time) -> part of the step. Operators not named here count as "other elementwise".
PARTS: dict[str, str] = {
    **dict.fromkeys(MATMULS, "matrix products"),
    **dict.fromkeys(("aten::_scaled_dot_product_flash_attention_for_cpu",
                     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
                    "attention, fused (SDPA: its products and softmax)"),
    **dict.fromkeys(("aten::copy_", "aten::_to_copy", "mkldnn::_reorder_linear_weight"),
                    "dtype casts, copies, weight packing"),
    **dict.fromkeys(("aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data", "aten::exp_",
                     "aten::_log_softmax_backward_data", "aten::masked_fill_", "aten::nan_to_num"),
                    "softmax, log-softmax, masks"),
    **dict.fromkeys(("aten::native_layer_norm", "aten::native_layer_norm_backward"), "LayerNorm"),
    **dict.fromkeys(("aten::random_", "aten::ge", "aten::addcmul", "aten::bernoulli_", "aten::native_dropout"),
                    "dropout and residual sums"),
    **dict.fromkeys(("aten::clamp_min", "aten::threshold_backward", "aten::relu", "aten::gelu",
                     "aten::gelu_backward"), "activation"),
    **dict.fromkeys(("aten::embedding", "aten::embedding_dense_backward", "aten::index_select", "aten::index_add_",
                     "aten::index_put_", "aten::embedding_backward"), "embedding and gathers"),
    **dict.fromkeys(("aten::_fused_adamw_", "aten::_fused_adam_", "aten::linalg_vector_norm", "aten::_foreach_norm",
                     "aten::_foreach_mul_", "aten::stack"), "optimizer and clipping"),
    **dict.fromkeys(("aten::empty", "aten::empty_strided", "aten::fill_", "aten::zero_", "aten::zeros",
                     "aten::resize_"), "allocation and zero fills"),
}
OUTSIDE = "outside operators (Python, autograd engine, dispatch, profiler)"
# View-only operators: their self time is bookkeeping, counted with the rest of the framework.
VIEWS = {"aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::slice", "aten::reshape",
         "aten::permute", "aten::expand", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::detach",
         "aten::_unsafe_view", "aten::alias", "aten::contiguous", "aten::lift_fresh", "aten::unbind",
         "aten::split", "aten::chunk", "aten::narrow", "aten::flatten", "aten::to", "aten::result_type"}


def _aten_self_times(prof: profile) -> Counter:
    """Self CPU time (µs) of every aten/mkldnn operator; autograd wrappers and user scopes excluded
    (their self time is the framework's, counted in OUTSIDE)."""
    times: Counter = Counter()
    for event in prof.key_averages():
        if event.key.startswith(("aten::", "mkldnn::")) and event.key not in VIEWS:
            times[event.key] += event.self_cpu_time_total
    return times


def profile_parts(step: Callable[[object], None], batches: list) -> tuple[dict[str, float], float]:
    """Run `step` over `batches` under the profiler -> ({part: seconds}, wall seconds of the pass)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for batch in batches:
            step(batch)
        wall = time.perf_counter() - t0
    parts: Counter = Counter()
    for name, micros in _aten_self_times(prof).items():
        parts[PARTS.get(name, "other elementwise and reductions")] += micros / 1e6
    parts[OUTSIDE] = max(0.0, wall - sum(parts.values()))
    return dict(parts), wall


def print_parts(parts: dict[str, float], wall: float, steps: int) -> None:
    """The per-part table, largest first (ms per step and share of the profiled wall time)."""
    print(f"  {'part of the step':<62}{'ms/step':>9}{'share':>8}")
    for name, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<62}{seconds / steps * 1e3:>9.1f}{seconds / wall:>8.1%}")
    print(f"  {'whole step (profiled; the profiler adds its own overhead)':<62}{wall / steps * 1e3:>9.1f}")


def _matmul_flops(name: str, shapes: list) -> int:
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return 2 * b * m * k * n
    if name == "aten::baddbmm":
        (b, m, k), (_, _, n) = shapes[1], shapes[2]
        return 2 * b * m * k * n
    if name in ("aten::addmm", "aten::addmm_"):
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2 * m * k * n
    if name == "mkldnn::_linear_pointwise":
        *lead, k = shapes[0]
        return 2 * math.prod(lead) * k * shapes[1][0]
    (m, k), (_, n) = shapes[0], shapes[1]
    return 2 * m * k * n


_DTYPES = {"float": torch.float32, "c10::BFloat16": torch.bfloat16, "c10::Half": torch.float16,
           "double": torch.float64}


def _operand(shape: list[int], stride: list[int], dtype: str) -> torch.Tensor:
    size = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True)) if shape else 1
    base = torch.randn(size).to(_DTYPES.get(dtype, torch.float32))
    return base.as_strided(shape, stride)


@dataclass
class Ceiling:
    """The step's matrix products replayed alone (seconds for all of them, one pass)."""

    cold: float  # operands just read from memory
    hot: float  # operands already in cache
    inside: float  # as they ran inside the profiled step
    flops: int  # their FLOPs (attention products and padded rows included)
    count: int  # products replayed


REPLAYS = 3  # timed replays of each distinct product (the best counts, as for the step itself)


def _frozen(nested: list) -> tuple:
    """Shapes/strides as recorded (lists, or non-tensor scalars) -> a hashable tuple of tuples."""
    return tuple(tuple(x) if isinstance(x, list) else () for x in nested)


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    """Row-major strides of `shape` (for an operand recorded without strides: a packed weight)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def _product(name: str, tensors: list) -> Callable[[], object]:
    """The recorded operator on replayed operands."""
    if name == "aten::mm":
        return lambda: torch.mm(tensors[0], tensors[1])
    if name == "aten::bmm":
        return lambda: torch.bmm(tensors[0], tensors[1])
    if name == "mkldnn::_linear_pointwise":  # the weight (N, K) packed once, as the loss packs it per update
        packed = torch.ops.mkldnn._reorder_linear_weight(tensors[1].contiguous(), tensors[0].size(0))
        return lambda: torch.ops.mkldnn._linear_pointwise(tensors[0], packed, None, "none", [], "")
    if name == "aten::addmm_":  # in place, as the loss accumulates dL/dW (a new output would be allocated)
        return lambda: tensors[0].addmm_(tensors[1], tensors[2])
    fn = torch.baddbmm if name == "aten::baddbmm" else torch.addmm
    return lambda: fn(tensors[0], tensors[1], tensors[2])


def matmul_ceiling(step: Callable[[object], None], batches: list) -> Ceiling:
    """Replay every matrix product of one pass of `step` over `batches` alone (oneDNN's packed
    linear, which the fp32 loss uses on non-Intel CPUs, on a weight of the recorded shape)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for batch in batches:
            step(batch)
    # One replay per distinct product (operator, shapes, strides, dtypes), weighted by how often it ran.
    distinct: dict[tuple, int] = Counter()
    inside = 0.0
    for event in prof.events():
        if event.name in MATMULS:
            key = (event.name, _frozen(event.input_shapes), _frozen(event.structured_input_strides),
                   tuple(event.input_dtypes))
            distinct[key] += 1
            inside += event.cpu_time_total / 1e6  # with any copy or allocation the product made
    flush = torch.empty(64 << 20, dtype=torch.uint8)
    cold = hot = 0.0
    count = flops = 0
    for (name, shapes, strides, dtypes), times in distinct.items():
        tensors = [_operand(list(s), list(st) or _contiguous(s), d) if s else None
                   for s, st, d in zip(shapes, strides, dtypes, strict=False)]
        product = _product(name, tensors)
        product()  # oneDNN builds its kernel for the shape once, as the step's warm-up did
        best_cold = best_hot = math.inf
        for _ in range(REPLAYS):
            flush.add_(1)
            t0 = time.perf_counter()
            product()
            t1 = time.perf_counter()
            product()
            best_cold, best_hot = min(best_cold, t1 - t0), min(best_hot, time.perf_counter() - t1)
        cold, hot = cold + times * best_cold, hot + times * best_hot
        flops += times * _matmul_flops(name, [list(x) for x in shapes])
        count += times
    return Ceiling(cold, hot, inside, flops, count)

