"""The benchmark scripts run end to end on minimal settings (their figures are not checked here:
speed is measured by running them on a quiet machine, never by timed unit tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_bench_model_runs() -> None:
    out = run("bench_model.py", "--config", "configs/tiny.yaml", "--steps", "1", "--warmup", "0", "--threads", "1",
              "--precision", "fp32")
    assert "tgt tok/s" in out and "mt" in out and "padding fraction" in out


def test_bench_model_bf16_branch_runs_on_any_cpu() -> None:
    """--force times bf16 whether or not this CPU has native bf16, so the branch that AMX machines
    take by themselves is exercised on AVX2-only machines too (nn.Transformer included)."""
    out = run("bench_model.py", "--config", "configs/tiny.yaml", "--steps", "1", "--warmup", "0", "--threads", "1",
              "--precision", "fp32", "bf16", "--force")
    rows = [line.split() for line in out.splitlines()]
    assert {(r[0], r[1], r[2]) for r in rows if len(r) >= 4 and r[1] in ("fp32", "bf16")} == {
        (m, p, mode) for m in ("nn.Transformer", "mt") for p in ("fp32", "bf16") for mode in ("train", "forward")}


def test_bench_translate_runs(multi30k_dir: Path) -> None:
    out = run("bench_translate.py", "--config", "configs/tiny.yaml", "--data", str(multi30k_dir), "--limit", "4",
              "--no-hf", "--out-len", "3", "--threads", "1")
    assert "cache speed-up" in out and "(identical output)" in out


def test_bench_prepare_runs(multi30k_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("sentencepiece")
    out = run("bench_prepare.py", "--pairs", "3000", "--workers", "1", "--sample-size", "3000", "--vocab-size", "500",
              "--data", str(multi30k_dir), "--workdir", str(tmp_path))
    assert "pairs/s" in out and "first update after" in out


def test_fuzz_translate_runs() -> None:
    out = run("fuzz_translate.py", "--lines", "30")
    assert "lines in 30, lines out 30: OK" in out and "invalid UTF-8 at line 31" in out


def test_bench_translate_stream_runs() -> None:
    out = run("bench_translate_stream.py", "--lines", "50", "200")
    assert "200 OK" in out and "peak RSS MiB" in out
