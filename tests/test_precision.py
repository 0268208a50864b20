"""`train.precision: auto`: every branch of the choice runs on any CPU (detection and timing are
monkeypatched), and the real probe agrees with this machine's CPU flags and its own timing."""

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


def cpu_flags() -> set[str]:
    """The flags of the first CPU in /proc/cpuinfo, read here (empty where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return next((set(line.partition(":")[2].split()) for line in text.splitlines()
                 if line.split(":")[0].strip() == "flags"), set())


def test_real_probe_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unpatched detection names what the CPU's flags say it has (AMX over AVX-512 BF16; None on
    AVX2-only CPUs such as Zen 3, where nothing may be timed), and auto's choice and reason follow
    the real timing (a small one here) it made."""
    flags = cpu_flags()
    feature = "AMX" if "amx_tile" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else None
    assert precision.bf16_feature("cpu") == feature
    real, timed = precision.matmul_speedup, []
    monkeypatch.setattr(precision, "matmul_speedup", lambda: timed.append(real(n=128, reps=1)) or timed[-1])
    choice = resolve_precision("auto", CPU)
    if feature is None:
        assert timed == [] and choice.precision == "fp32" and "no native bf16" in choice.reason
    else:
        assert len(timed) == 1 and timed[0] > 0
        assert choice.precision == ("bf16" if timed[0] >= MIN_MATMUL_SPEEDUP else "fp32")
        assert feature in choice.reason and f"{timed[0]:.2f}x" in choice.reason
