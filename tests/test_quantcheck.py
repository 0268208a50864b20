"""int8 exports: the reduced weight range (no AVX2 saturation) and the BLEU check written into
mt_export.json and MODEL_CARD.md (mt/deploy/quantcheck.py), through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO
from mt.config import Config, ModelConfig, TokenizerConfig
from mt.data.tokenizer import train_sentencepiece
from mt.deploy.export import INT8_REDUCED_MAX, _quantize_int8_reduced, build_spec, read_export_info
from mt.deploy.quantcheck import check_quantization, describe
from mt.model.checkpoint import inference_state, load_checkpoint
from mt.model.transformer import Transformer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.requires("ctranslate2")]


def _quantizable(spec: object) -> list[tuple[object, str, object]]:
    """(layer, name, value) of every variable with a `<name>_scale` sibling."""
    from ctranslate2.specs import model_spec

    found = []

    def visit(layer: object, name: str, value: object) -> None:
        key = name.split("/")[-1]
        if hasattr(layer, f"{key}_scale") and hasattr(value, "numpy"):
            found.append((layer, key, value))

    model_spec.visit_spec(spec, visit)
    return found


def test_reduced_range_weights_stay_within_63_and_dequantise_to_the_floats(tmp_path: Path) -> None:
    lines = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(6)) for i in range(300)]
    tok = train_sentencepiece(lines, lines, TokenizerConfig(vocab_size=50, joint=True, byte_fallback=False))
    cfg = Config(name="toy", model=ModelConfig(d_model=32, heads=4, encoder_layers=1, decoder_layers=1, d_ff=64,
                                               dropout=0.0, max_positions=64))
    torch.manual_seed(0)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=True)
    state = inference_state(cfg, tok, model, update=1, epoch=1)
    spec = build_spec(cfg, state)
    spec.validate()
    spec.optimize(quantization=None)
    floats = {id(layer): value.to("float32").numpy().copy() for layer, _, value in _quantizable(spec)}
    _quantize_int8_reduced(spec)
    quantised = _quantizable(spec)
    assert len(quantised) >= 10  # every linear layer and the embeddings
    for layer, key, value in quantised:
        q = value.numpy()
        scale = getattr(layer, f"{key}_scale").numpy()
        assert q.dtype == np.int8
        assert np.abs(q).max(axis=1).tolist() == [INT8_REDUCED_MAX] * q.shape[0]  # each row uses the range
        w = floats[id(layer)]
        assert np.abs(q / scale[:, None] - w).max() <= (0.5 / scale).max() + 1e-6  # rounding error only


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mt", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def test_int8_export_measures_itself_against_float32_on_val(tmp_path: Path, tiny_base: Path) -> None:
    """`mt export --quantization int8` writes both BLEUs, the log-prob error and the CPU into
    mt_export.json and MODEL_CARD.md; --int8-range full and --no-check are honoured."""
    out = tmp_path / "int8"
    proc = _cli("export", str(tiny_base), "--format", "ctranslate2", "-o", str(out), "--quantization", "int8",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = read_export_info(out)
    assert info["int8_range"] == "reduced"
    check = info["quantization_check"]
    (row,) = check["sets"]
    assert row["label"] == "val" and row["sentences"] == 1014  # Multi30k's val split
    for name in ("float32", "int8"):
        assert 0.0 <= row[name]["bleu"] <= 100.0 and row[name]["chrf"] > 0.0
    assert row["bleu_delta"] == pytest.approx(row["int8"]["bleu"] - row["float32"]["bleu"], abs=0.011)
    assert 0.0 < row["logprob_error"]["mean"] <= row["logprob_error"]["p99"]  # int8 is not float32
    assert check["cpu"] and check["isa"] and check["beam"] == load_checkpoint(tiny_base)["config"]["decode"]["search"]["beam"]
    assert check["summary"] in proc.stdout
    card = (out / "MODEL_CARD.md").read_text()
    assert f"- {check['summary']}" in card and "in [-63, 63]" in card
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # the float32 reference is gone

    full = tmp_path / "full"
    proc = _cli("export", str(tiny_base), "--format", "ctranslate2", "-o", str(full), "--quantization", "int8",
                "--int8-range", "full", "--no-check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = read_export_info(full)
    assert info["int8_range"] == "full" and "quantization_check" not in info
    assert "in [-127, 127]" in (full / "MODEL_CARD.md").read_text()
    bad = _cli("export", str(tiny_base), "--format", "ctranslate2", "-o", str(tmp_path / "bad"), "--quantization",
               "int8", "--int8-range", "7bit", cwd=tmp_path)
    assert bad.returncode != 0 and "unknown --int8-range '7bit'" in bad.stderr and "Traceback" not in bad.stderr


def test_check_without_the_validation_set_says_not_measured(tmp_path: Path, tiny_base: Path) -> None:
    from mt.deploy.export import export_ctranslate2

    out = export_ctranslate2(tiny_base, tmp_path / "int8", quantization="int8")
    info_path = out / "mt_export.json"
    info = json.loads(info_path.read_text())
    info["config"]["data"]["path"] = str(tmp_path / "elsewhere")  # an export made away from its corpus
    info_path.write_text(json.dumps(info))
    record = check_quantization(out, tiny_base)
    assert "sets" not in record and "validation set not readable here" in record["skipped"]
    assert read_export_info(out)["quantization_check"]["skipped"] == record["skipped"]
    assert "int8 against float32: not measured" in describe(record)
    assert "not measured" in (out / "MODEL_CARD.md").read_text()
