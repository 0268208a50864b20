"""`train.precision: auto`: every branch of the choice runs on any CPU (detection and timing are
monkeypatched), and the real probe gives an answer with a reason on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from mt.config_load import load_config
from mt.train import precision
from mt.train.precision import MIN_MATMUL_SPEEDUP, MIN_STEP_SPEEDUP, resolve_precision

ROOT = Path(__file__).resolve().parents[1]

CPU = torch.device("cpu")


def test_explicit_precision_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "matmul_speedup", lambda: pytest.fail("no timing for an explicit choice"))
    for p in ("fp32", "bf16", "fp16"):
        assert resolve_precision(p, CPU).precision == p


def test_avx2_only_cpu_trains_in_fp32_without_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "bf16_feature", lambda device: None)
    monkeypatch.setattr(precision, "matmul_speedup", lambda: pytest.fail("no timing without native bf16"))
    choice = resolve_precision("auto", CPU)
    assert choice.precision == "fp32" and "no native bf16" in choice.reason


@pytest.mark.parametrize("feature", ["AMX", "AVX-512 BF16"])
def test_native_bf16_cpu_trains_in_bf16_when_the_check_confirms(monkeypatch: pytest.MonkeyPatch,
                                                                 feature: str) -> None:
    monkeypatch.setattr(precision, "bf16_feature", lambda device: feature)
    monkeypatch.setattr(precision, "matmul_speedup", lambda: 4.2)
    choice = resolve_precision("auto", CPU)
    assert choice.precision == "bf16" and feature in choice.reason and "4.20x" in choice.reason


def test_native_bf16_cpu_keeps_fp32_when_bf16_is_not_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "bf16_feature", lambda device: "AVX-512 BF16")
    monkeypatch.setattr(precision, "matmul_speedup", lambda: MIN_MATMUL_SPEEDUP * 0.9)
    choice = resolve_precision("auto", CPU)
    assert choice.precision == "fp32" and "only" in choice.reason


def test_a_timed_training_step_decides_when_the_trainer_gives_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's probe (a real step of its model) overrules the matrix product: a fast bf16
    product with a bf16 step below MIN_STEP_SPEEDUP stays fp32, and the reason says so."""
    monkeypatch.setattr(precision, "bf16_feature", lambda device: "AMX")
    monkeypatch.setattr(precision, "matmul_speedup", lambda: pytest.fail("the step was timed instead"))
    slow = resolve_precision("auto", CPU, probe=lambda: MIN_STEP_SPEEDUP * 0.8)
    assert slow.precision == "fp32" and "training step" in slow.reason and "only 0.88x" in slow.reason
    fast = resolve_precision("auto", CPU, probe=lambda: 1.6)
    assert fast.precision == "bf16" and "training step of this model ran 1.60x" in fast.reason


def test_step_speedup_times_a_real_model_and_leaves_the_rng_alone() -> None:
    cfg = load_config(ROOT / "configs" / "tiny.yaml")
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    assert precision.step_speedup(cfg.model, cfg.tokenizer.vocab_size, 256, reps=1) > 0
    assert precision.step_speedup(cfg.model, cfg.tokenizer.vocab_size, 256, reps=1, repeated_shapes=True) > 0
    assert torch.equal(torch.rand(3), expected)


def test_pad_multiple_auto_pads_only_16_bit_cpu_training() -> None:
    assert precision.pad_multiple_for(0, "bf16", CPU) == precision.AUTO_PAD_MULTIPLE == 4
    assert precision.pad_multiple_for(0, "fp16", CPU) == 4
    assert precision.pad_multiple_for(0, "fp32", CPU) == 1  # MKL's fp32 products compile nothing
    assert precision.pad_multiple_for(0, "bf16", torch.device("cuda")) == 1
    assert precision.pad_multiple_for(8, "fp32", CPU) == 8 and precision.pad_multiple_for(1, "bf16", CPU) == 1


def test_kernel_cache_capacity_is_raised_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    precision.keep_compiled_kernels()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(precision.ONEDNN_KERNEL_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    precision.keep_compiled_kernels()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"


def test_real_probe_on_this_machine() -> None:
    # Whatever this CPU is, auto resolves to fp32 or bf16 and says why; the timing is a ratio > 0.
    choice = resolve_precision("auto", CPU)
    assert choice.precision in ("fp32", "bf16") and choice.reason.startswith("auto:")
    assert precision.matmul_speedup(n=128, reps=1) > 0
    assert precision.bf16_feature("cpu") in (None, "AMX", "AVX-512 BF16")
