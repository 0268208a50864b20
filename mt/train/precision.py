"""Training precision: what `train.precision: auto` means on the machine at hand.

CPUs differ: on AVX2-only CPUs bf16 matrix products are emulated and run ~100x slower than fp32,
while CPUs with AVX-512 BF16 or AMX run them several times faster than fp32. `auto` therefore
picks bf16 autocast only when the CPU reports native bf16 AND a quick timed check confirms
that bf16 is faster here; fp32 otherwise. The trainer's check (`step_speedup`, ~1-3 s at start-up)
times forward + backward passes of a throwaway model of the configured size in both precisions:
a fast bf16 matrix product is not enough (on one AMX machine a d_model 192 model trained ~30%
slower in bf16 while a 1024^3 bf16 product ran 3.4x as fast as fp32, because oneDNN compiles a
bf16 kernel for every new batch shape and its cache held only 1,024 of them). bf16 training on
CPU therefore pads batch widths to a multiple of 4 (`train.pad_multiple` auto: a few dozen
shapes) and raises oneDNN's kernel cache; the check times passes over a repeated shape then, and
over new shapes when padding is turned off. Without a model
to time (`probe=None`), a timed matrix product stands in. On CUDA it picks bf16 where the GPU
supports it. The choice comes with a one-line reason for the training log.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mt.config import Config, ModelConfig
from mt.data.batching import collate
from mt.device import bf16_feature
from mt.model.transformer import Transformer
from mt.train import distributed
from mt.train.distributed import DistInfo
from mt.train.step import autocast, batch_loss

# A training step is not only matrix products (casts, softmax, LayerNorm, the optimizer stay as
# they are), so bf16 must win clearly on the matmuls before it is chosen.
MIN_MATMUL_SPEEDUP = 2.0
# Timing a real step leaves only noise to guard against (and bf16 rounds more): 10% faster at least.
MIN_STEP_SPEEDUP = 1.1


# train.pad_multiple 0 (auto) under bf16/fp16 autocast on CPU: widths rounded up to a multiple of 4
# give ~40 batch shapes on Multi30k (at 11% padding, against 5% unpadded), which oneDNN's compiled
# bf16 kernels then serve from its cache. fp32 products (MKL) compile nothing: no padding there.
AUTO_PAD_MULTIPLE = 4
# oneDNN keeps 1,024 compiled kernels by default; a bf16 training step uses ~40 (forward, both
# backward products of every projection, attention), so a few dozen shapes already overflow it and
# every batch recompiles. 16,384 holds them all (resident memory: ~2.1 GB for the demo model).
ONEDNN_KERNEL_CACHE = 16384


def keep_compiled_kernels() -> None:
    """Raise oneDNN's primitive-cache capacity unless the user set ONEDNN_PRIMITIVE_CACHE_CAPACITY.

    oneDNN reads the variable when it builds its first primitive, so this must run before any
    bf16 work in the process (the trainer calls it first thing)."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNEL_CACHE))


def pad_multiple_for(requested: int, precision: str, device: torch.device) -> int:
    """train.pad_multiple resolved: as set when >= 1; 0 (auto): AUTO_PAD_MULTIPLE under 16-bit
    autocast on CPU, where oneDNN compiles a kernel per matrix shape, else 1 (no extra padding)."""
    if requested >= 1:
        return requested
    return AUTO_PAD_MULTIPLE if precision in ("bf16", "fp16") and device.type == "cpu" else 1


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision training runs in and why."""

    precision: str  # fp32 | bf16 | fp16
    reason: str


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


def step_speedup(model_cfg: ModelConfig, vocab_size: int, max_tokens: int, *, reps: int = 3,
                 repeated_shapes: bool = False) -> float:
    """fp32 time over bf16 time (> 1: bf16 faster) of training forward + backward passes of a
    throwaway model shaped by `model_cfg`, on synthetic batches of about `max_tokens` padded tokens.

    By default every timed pass has a batch shape of its own (both precisions see the same
    shapes), because unpadded training batches keep bringing new ones: on CPU, oneDNN builds
    (JIT-compiles) a bf16 kernel for each new matrix shape, which made bf16 training slower than
    fp32 on an AMX machine where a bf16 pass over one repeated shape was 1.5x faster.
    `repeated_shapes` (training with `train.pad_multiple` > 1, a few dozen shapes that recur
    every epoch): the timed passes reuse the warm-up's shape, as training does after its first
    epoch. Sum over `reps` passes after a warm-up; the caller's RNG state is left as it was."""
    vocab = max(vocab_size, 8)
    cpu = torch.device("cpu")
    total = {"fp32": 0.0, "bf16": 0.0}
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Transformer(model_cfg, vocab, vocab, joint_vocab=True).train()
        for rep in range(reps + 1):
            variant = 0 if repeated_shapes else rep  # 0 for every pass, or a shape not seen before
            length = 11 + 2 * variant
            batch = max(1, max_tokens // (2 * length) - variant)
            src = torch.randint(4, vocab, (batch, length)).numpy()
            tgt = torch.randint(4, vocab, (batch, length)).numpy()
            pairs = collate(list(src), list(tgt), np.arange(batch))  # + EOS / BOS: widths length + 1
            for precision in total:
                t0 = time.perf_counter()
                with autocast(precision, cpu):
                    loss = batch_loss(model, model, pairs, 0.1)[0]  # the trainer's loss
                loss.backward()
                model.zero_grad(set_to_none=True)
                if rep > 0:  # rep 0 warms up what does not depend on the shape
                    total[precision] += time.perf_counter() - t0
    return total["fp32"] / total["bf16"]


def resolve_precision(requested: str, device: torch.device,
                      probe: Callable[[], float] | None = None) -> PrecisionChoice:
    """`requested` (auto | fp32 | bf16 | fp16) -> the precision to train in on `device`, with the reason.

    `probe` times the training step itself (the trainer passes `step_speedup` for its model);
    without one, a matrix product is timed."""
    if requested != "auto":
        return PrecisionChoice(requested, "set by train.precision")
    if device.type not in ("cuda", "cpu"):
        return PrecisionChoice("fp32", f"auto: no bf16 check for {device.type} devices")
    feature = bf16_feature(device)
    if device.type == "cuda":
        if feature is not None:
            return PrecisionChoice("bf16", "auto: the CUDA device supports bf16")
        return PrecisionChoice("fp32", "auto: the CUDA device has no bf16 support")
    if feature is None:
        return PrecisionChoice("fp32", "auto: this CPU has no native bf16 (neither AVX-512 BF16 nor AMX), "
                                       "so bf16 matrix products would be emulated and far slower")
    what, needed = ("a bf16 training step of this model", MIN_STEP_SPEEDUP) if probe is not None else \
        ("a bf16 matrix product", MIN_MATMUL_SPEEDUP)
    speedup = probe() if probe is not None else matmul_speedup()
    if speedup < needed:
        return PrecisionChoice("fp32", f"auto: the CPU has {feature}, but {what} ran only "
                                       f"{speedup:.2f}x as fast as fp32 here (bf16 needs {needed:.1f}x)")
    return PrecisionChoice("bf16", f"auto: the CPU has {feature} and {what} ran {speedup:.2f}x as fast "
                                   f"as fp32 here")


def run_precision(cfg: Config, info: DistInfo, device: torch.device) -> tuple[Config, PrecisionChoice]:
    """The training run's precision (auto resolved by timing this model's step; DDP ranks follow
    rank 0) and `cfg` with train.pad_multiple resolved for it."""
    if device.type == "cpu":
        keep_compiled_kernels()  # before the probe: its bf16 passes are the process's first oneDNN work
    # A bf16 run would pad (pad_multiple auto) and so reuse its kernels: the probe times that case.
    bounded_shapes = pad_multiple_for(cfg.train.pad_multiple, "bf16", device) > 1
    choice = resolve_precision(cfg.train.precision, device, probe=lambda: step_speedup(
        cfg.model, cfg.tokenizer.vocab_size, cfg.train.max_tokens, repeated_shapes=bounded_shapes))
    if cfg.train.precision == "auto" and info.enabled:  # each rank timed its own check: follow rank 0
        bf16 = distributed.broadcast_flag(choice.precision == "bf16", info, device)
        if bf16 != (choice.precision == "bf16"):
            choice = PrecisionChoice("bf16" if bf16 else "fp32", "auto: as chosen on rank 0")
    pad = pad_multiple_for(cfg.train.pad_multiple, choice.precision, device)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, pad_multiple=pad)), choice
