"""Fine-tuning (`mt train --init-from CKPT`) through the real CLI on the tiny config.

A tiny en->de model is trained once (`tiny_base`); the tests start en->fr runs from it. They
check that the weights are the checkpoint's before the first step (lr 0: an update changes
nothing) and not a fresh init's, that the tokenizer is reused byte for byte (no sentencepiece
training; the cache is rebuilt when the init tokenizer changes), that the model section is taken
from the checkpoint or must match it (dropout may differ), that update count, optimizer, best
score and patience start fresh, that every checkpoint records its origin and `mt evaluate`
reports it, and that bad inputs are one line each.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_train import copy_run

from mt.config import Config
from mt.data.prepare import prepare
from mt.data.tokenizer import JOINT_MODEL, Tokenizer, train_sentencepiece
from mt.model.checkpoint import load_checkpoint
from mt.model.transformer import Transformer
from mt.train.state import seed_everything

REPO = Path(__file__).resolve().parents[1]
FT_TRAIN = {"max_updates": 2, "valid_every": 0, "valid_bleu": False, "save_every": 1, "keep_checkpoints": 5,
            "log_every": 1, "threads": 1, "warmup": 10, "precision": "fp32", "patience": 3}


def ft_yaml(path: Path, data_dir: Path, run_root: Path, *, model: dict | None = None, **train: object) -> Path:
    """An en->fr fine-tuning config with no tokenizer section and (by default) no model section."""
    raw: dict = {"name": "ft", "run_root": str(run_root),
                 "data": {"path": str(data_dir), "src_lang": "en", "tgt_lang": "fr", "train_limit": 300},
                 "train": {**FT_TRAIN, **train}}
    if model is not None:
        raw["model"] = model
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def mt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mt", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The stderr of a run that failed as a user error: exit 2, one line, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mt: error: "), proc.stderr
    return lines[0]


def test_weights_are_the_checkpoints_tokenizer_reused_state_fresh(tmp_path: Path, multi30k_dir: Path,
                                                                    tiny_base: Path, tiny_run: Config) -> None:
    base = load_checkpoint(tiny_base)
    assert base["update"] == 6 and base["config"]["data"]["tgt_lang"] == "de"

    # One Adam step moves each weight by at most the learning rate (|m / sqrt(v)| <= 1 on the first
    # step), so at lr 1e-6 the first update's weights are the checkpoint's to within ~1e-6.
    zero = ft_yaml(tmp_path / "zero.yaml", multi30k_dir, tmp_path / "zero", schedule="constant", lr=1e-6,
                   warmup=0, max_updates=1)
    out = ok(mt("train", str(zero), "--init-from", str(tiny_base), cwd=tmp_path))
    assert "reusing the tokenizer" in out and "trained unigram sentencepiece" not in out
    run = tmp_path / "zero" / "ft"
    first = load_checkpoint(run / "checkpoints" / "update_1.pt")
    assert first["model"].keys() == base["model"].keys()
    for name, tensor in base["model"].items():
        assert (first["model"][name] - tensor).abs().max() <= 1.5e-6, name
    assert any(not torch.equal(first["model"][k], v) for k, v in base["model"].items())  # it did take a step
    # ... and not what a fresh run of this config would have started from (same seed, same shapes).
    seed_everything(1)
    fresh = Transformer(tiny_run.model, base["src_vocab_size"], base["tgt_vocab_size"], joint_vocab=True).state_dict()
    differ = [k for k, v in fresh.items() if (v - first["model"][k]).abs().max() > 1e-2]
    assert len(differ) > len(fresh) // 2, differ

    # The tokenizer is the checkpoint's, byte for byte; the model config is the checkpoint's.
    assert (run / JOINT_MODEL).read_bytes() == base["tokenizer"]["src"]
    assert first["tokenizer"] == base["tokenizer"]
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved["model"] == base["config"]["model"] and saved["tokenizer"] == base["config"]["tokenizer"]
    assert saved["data"]["tgt_lang"] == "fr" and saved["train"]["init_from"] == str(tiny_base)
    report = json.loads((run / "data" / "clean_report.json").read_text(encoding="utf-8"))
    assert report["pairs"]["en-fr"]["round_trip"]["train"]["lines"] == 300  # cleaning and round-trip checks still ran
    manifest = json.loads((run / "data" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["tokenizer_from"]["path"] == str(tiny_base)

    # A real run: weights move; update count, optimizer, best score and patience start fresh; dropout may differ.
    real = ft_yaml(tmp_path / "real.yaml", multi30k_dir, tmp_path / "real", model={"d_model": 64, "dropout": 0.3})
    ok(mt("train", str(real), "--init-from", str(tiny_base), cwd=tmp_path))
    ckpts = tmp_path / "real" / "ft" / "checkpoints"
    last = load_checkpoint(ckpts / "last.pt")
    assert last["update"] == 2 and last["config"]["model"]["dropout"] == 0.3
    assert last["config"]["model"]["d_model"] == 64 and last["config"]["model"]["norm"] == base["config"]["model"]["norm"]
    assert any(not torch.equal(last["model"][k], v) for k, v in base["model"].items() if v.is_floating_point())
    state = last["training"]["state"]
    base_state = load_checkpoint(tiny_base.with_name("last.pt"))["training"]["state"]
    assert base_state["update"] == 6 and base_state["best_update"] == 6
    assert state["update"] == 2 and state["epoch"] == 1 and state["best_update"] == 2
    assert [r["update"] for r in state["history"]] == [2] and state["bad_validations"] == 0
    assert all(s["step"] == 2 for s in last["training"]["optimizer"]["state"].values())  # Adam moments: 2 steps only
    sha = hashlib.sha256(tiny_base.read_bytes()).hexdigest()
    record = {"path": str(tiny_base.resolve()), "sha256": sha, "update": 6}
    for name in ("last.pt", "best.pt", "update_1.pt", "update_2.pt"):
        assert load_checkpoint(ckpts / name)["init_from"] == record, name

    # mt evaluate prints where the model started and writes it into its JSON report.
    with gzip.open(multi30k_dir / "val.en.gz", "rt", encoding="utf-8") as f:
        src = [next(f) for _ in range(8)]
    with gzip.open(multi30k_dir / "val.fr.gz", "rt", encoding="utf-8") as f:
        ref = [next(f) for _ in range(8)]
    (tmp_path / "s.en").write_text("".join(src), encoding="utf-8")
    (tmp_path / "r.fr").write_text("".join(ref), encoding="utf-8")
    out = ok(mt("evaluate", "-c", str(ckpts / "best.pt"), "--src", "s.en", "--ref", "r.fr", "--beam", "1",
                "--samples", "0", "--out-dir", "ev", cwd=tmp_path))
    assert f"fine-tuned from {tiny_base.resolve()} (sha256 {sha[:12]}, update 6)" in out
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in (tmp_path / "ev").glob("*.json")]
    assert len(reports) == 1 and reports[0]["init_from"] == record
    assert reports[0]["checkpoints"][0]["init_from"] == record
    out = ok(mt("evaluate", "-c", str(tiny_base), "--src", "s.en", "--ref", "r.fr", "--beam", "1", "--samples", "0",
                "--out-dir", "ev_base", cwd=tmp_path))
    assert "fine-tuned from" not in out
    assert json.loads(next((tmp_path / "ev_base").glob("*.json")).read_text(encoding="utf-8"))["init_from"] is None


def test_model_and_tokenizer_must_match_the_checkpoint(tmp_path: Path, multi30k_dir: Path, tiny_base: Path) -> None:
    cfg = ft_yaml(tmp_path / "ft.yaml", multi30k_dir, tmp_path / "runs", model={"d_model": 32, "heads": 2,
                                                                              "encoder_layers": 2, "dropout": 0.5})
    line = one_line_error(mt("train", str(cfg), "--init-from", str(tiny_base), cwd=tmp_path))
    assert "model.d_model 32 (config) vs 64 (checkpoint)" in line and "model.heads 2 (config) vs 4 (checkpoint)" in line
    assert "encoder_layers" not in line and "dropout" not in line  # equal, and trainable: not a mismatch
    line = one_line_error(mt("train", str(cfg), "--init-from", str(tiny_base), "--set", "model.d_model=64",
                             "--set", "model.heads=4", "--set", "tokenizer.vocab_size=500",
                             "--set", "model.norm=pre", cwd=tmp_path))
    assert "tokenizer.vocab_size 500 (config) vs 1000 (checkpoint)" in line and "model.norm 'pre'" in line
    line = one_line_error(mt("prepare", str(cfg), "--set", f"train.init_from={tiny_base}", cwd=tmp_path))
    assert "model.d_model 32 (config) vs 64 (checkpoint)" in line
    assert not (tmp_path / "runs").exists()  # nothing prepared or trained


def test_bad_init_checkpoints_are_one_line(tmp_path: Path, multi30k_dir: Path, tiny_base: Path) -> None:
    cfg = ft_yaml(tmp_path / "ft.yaml", multi30k_dir, tmp_path / "runs")
    assert "file not found" in one_line_error(mt("train", str(cfg), "--init-from", "nope.pt", cwd=tmp_path))
    (tmp_path / "torn.pt").write_bytes(tiny_base.read_bytes()[:5000])
    line = one_line_error(mt("train", str(cfg), "--init-from", "torn.pt", cwd=tmp_path))
    assert "train.init_from 'torn.pt'" in line and "truncated or corrupt" in line
    export = tmp_path / "exported"
    export.mkdir()
    (export / "model.bin").write_bytes(b"\0")
    line = one_line_error(mt("train", str(cfg), "--init-from", str(export), cwd=tmp_path))
    assert "an `mt export` directory" in line and ".pt" in line
    line = one_line_error(mt("train", str(cfg), "--init-from", str(tiny_base), "--resume", cwd=tmp_path))
    assert "--init-from" in line and "--resume" in line
    assert not (tmp_path / "runs").exists()


def test_prepare_reuses_the_tokenizer_and_rebuilds_when_it_changes(tmp_path: Path, tiny_run: Config,
                                                                   multi30k_dir: Path) -> None:
    """The cache fingerprint covers the reused tokenizer's bytes: another one re-encodes."""
    first = Tokenizer.from_files(tiny_run.run_dir)
    cfg = dataclasses.replace(copy_run(tiny_run, tmp_path), train=dataclasses.replace(tiny_run.train,
                                                                                     init_from="base.pt"))
    prepare(cfg, tokenizer=first)  # the copied cache was built with a trained tokenizer: rebuilt
    manifest = json.loads((cfg.run_dir / "data" / "manifest.json").read_text(encoding="utf-8"))
    assert (cfg.run_dir / JOINT_MODEL).read_bytes() == first.model_bytes()["src"]
    ids = (cfg.run_dir / "data" / "train.tgt.ids").read_bytes()
    prepare(cfg, tokenizer=Tokenizer.from_bytes(first.model_bytes()["src"]))  # same bytes: up to date
    assert json.loads((cfg.run_dir / "data" / "manifest.json").read_text(encoding="utf-8")) == manifest

    with gzip.open(multi30k_dir / "train.fr.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(2000)]
    other = train_sentencepiece(lines, lines, dataclasses.replace(tiny_run.tokenizer, vocab_size=400))
    prepare(cfg, tokenizer=other)
    rebuilt = json.loads((cfg.run_dir / "data" / "manifest.json").read_text(encoding="utf-8"))
    assert rebuilt["fingerprint"] != manifest["fingerprint"] and rebuilt["src_vocab_size"] == 400
    assert (cfg.run_dir / JOINT_MODEL).read_bytes() == other.model_bytes()["src"]
    assert (cfg.run_dir / "data" / "train.tgt.ids").read_bytes() != ids
    with pytest.raises(Exception, match="train.init_from 'base.pt' is set"):
        prepare(cfg)  # a library caller must hand over the tokenizer
