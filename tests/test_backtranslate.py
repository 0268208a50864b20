"""`mt backtranslate` end to end on a tiny random de->en model: sampled output independent of the
chunking, a killed (SIGKILL) and a forced-stopped run resumed to the same bytes as an
uninterrupted one, beam mode, every mono format, the manifest, and one-line errors."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_evaluate import run_cli

from mt.config import Config
from mt.data import pairwriter
from mt.data.corpus import read_split
from mt.data.tokenizer import EOS_ID, Tokenizer
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]
LINES = 60


@pytest.fixture(scope="module")
def reverse_ckpt(tiny_run: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random de->en tiny model on the tiny run's joint tokenizer, short outputs."""
    data = dataclasses.replace(tiny_run.data, src_lang="de", tgt_lang="en", pairs=())
    decode = dataclasses.replace(tiny_run.decode, search=dataclasses.replace(tiny_run.decode.search, max_len_a=0.5, max_len_b=3))
    cfg = dataclasses.replace(tiny_run, data=data, decode=decode)
    tokenizer = Tokenizer.from_files(tiny_run.run_dir)
    torch.manual_seed(0)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint)
    with torch.no_grad():
        model.tgt_embed.weight[EOS_ID] = 0.0
    path = tmp_path_factory.mktemp("reverse") / "de_en.pt"
    save_checkpoint(path, inference_state(cfg, tokenizer, model))
    return path


@pytest.fixture(scope="module")
def mono(tiny_run: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LINES German validation lines (one empty) as a plain text file."""
    _, de = read_split(tiny_run.data, "val")
    lines = de[:LINES]
    lines[7] = ""
    path = tmp_path_factory.mktemp("mono") / "mono.de"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _bt(monkeypatch, capsys, ckpt: Path, mono: Path, out: Path, *extra: object) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "backtranslate", "-c", ckpt, "--mono", mono, "-o", out, *extra)


def _files(out: Path) -> tuple[bytes, bytes]:
    return (out / "train.en").read_bytes(), (out / "train.de").read_bytes()


@pytest.fixture(scope="module")
def reference(reverse_ckpt: Path, mono: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted sampled run (top-k 20, seed 3, chunks of 25 lines), through a subprocess."""
    out = tmp_path_factory.mktemp("ref") / "bt"
    subprocess.run([sys.executable, "-m", "mt", "backtranslate", "-c", str(reverse_ckpt), "--mono", str(mono), "-o",
                    str(out), "--top-k", "20", "--seed", "3", "--chunk-lines", "25"], check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out


def test_sampled_output_aligned_and_independent_of_chunking(reverse_ckpt, mono, reference, tmp_path, monkeypatch,
                                                            capsys):
    src, tgt = _files(reference)
    mono_lines = mono.read_text(encoding="utf-8").splitlines()
    assert tgt.decode().splitlines() == mono_lines  # the monolingual side, line for line
    synthetic = src.decode().split("\n")[:-1]
    assert len(synthetic) == LINES and synthetic[7] == "" and all(synthetic[i] for i in range(LINES) if i != 7)
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["input_lines"] == LINES and manifest["counts"]["empty"] == 1 and manifest["mode"] == "sampling"
    assert manifest["decode"]["search"]["top_k"] == 20 and manifest["decode"]["search"]["seed"] == 3
    assert len(manifest["models"][0]["sha256"]) == 64 and not (reference / "progress.json").exists()
    code, _, err = _bt(monkeypatch, capsys, reverse_ckpt, mono, tmp_path / "b", "--top-k", "20", "--seed", "3",
                       "--chunk-lines", "7", "--max-tokens", "300")
    assert code == 0, err
    assert _files(tmp_path / "b") == (src, tgt)  # other chunks and batches: the same draws per line
    code, _, err = _bt(monkeypatch, capsys, reverse_ckpt, mono, tmp_path / "c", "--top-k", "20", "--seed", "4")
    assert code == 0, err
    assert _files(tmp_path / "c")[0] != src  # another seed, other samples


def test_killed_run_resumes_to_the_same_bytes(reverse_ckpt, mono, reference, tmp_path):
    """SIGKILL after the first committed chunk, then the same command: the files equal the uninterrupted run's."""
    out = tmp_path / "bt"
    cmd = [sys.executable, "-m", "mt", "backtranslate", "-c", str(reverse_ckpt), "--mono", str(mono), "-o", str(out),
           "--top-k", "20", "--seed", "3", "--chunk-lines", "5"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    progress = out / pairwriter.PROGRESS
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.is_file() and json.loads(progress.read_text() or "{}").get("lines", 0) >= 5:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = json.loads(progress.read_text())["lines"]
    assert 5 <= done < LINES, "the run finished before it could be killed"
    with open(out / "train.en", "ab") as f:  # what a kill between the data and the record leaves
        f.write(b"half a line")
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    assert _files(out) == _files(reference)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_at"] == done and manifest["input_lines"] == LINES


def test_forced_stop_between_data_and_record_resumes(reverse_ckpt, mono, reference, tmp_path, monkeypatch, capsys):
    """A stop after chunk 3's lines are written but before its record: chunk 3 is redone, not doubled."""
    commit, calls = pairwriter.PairWriter._commit, []

    def stop_at_fourth(self):
        calls.append(1)
        if len(calls) == 4:  # the empty start, then chunks 1, 2: the record of chunk 3 is never written
            raise KeyboardInterrupt
        commit(self)

    monkeypatch.setattr(pairwriter.PairWriter, "_commit", stop_at_fourth)
    out = tmp_path / "bt"
    code, _, _ = _bt(monkeypatch, capsys, reverse_ckpt, mono, out, "--top-k", "20", "--seed", "3", "--chunk-lines", "10")
    assert code == 130 and json.loads((out / "progress.json").read_text())["lines"] == 20
    monkeypatch.setattr(pairwriter.PairWriter, "_commit", commit)
    code, stdout, err = _bt(monkeypatch, capsys, reverse_ckpt, mono, out, "--top-k", "20", "--seed", "3",
                            "--chunk-lines", "10")
    assert code == 0, err
    assert "resumed at line 20" in stdout
    assert _files(out) == _files(reference)
    code, stdout, _ = _bt(monkeypatch, capsys, reverse_ckpt, mono, out, "--top-k", "20", "--seed", "3")
    assert code == 0 and "nothing to do" in stdout  # finished: left as it is


def test_beam_mode_and_mono_formats(reverse_ckpt, mono, tmp_path, monkeypatch, capsys):
    lines = mono.read_text(encoding="utf-8").splitlines()[:12]
    plain = tmp_path / "m.de.gz"
    plain.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    tsv = tmp_path / "m.tsv"
    tsv.write_text("".join(f"x\t{line}\n" for line in lines), encoding="utf-8")
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps({"src": "x", "tgt": line}) + "\n" for line in lines), encoding="utf-8")
    outputs = []
    for i, path in enumerate((plain, tsv, jsonl)):
        code, _, err = _bt(monkeypatch, capsys, reverse_ckpt, path, tmp_path / f"o{i}", "--beam", "2")
        assert code == 0, err
        outputs.append(_files(tmp_path / f"o{i}"))
        assert json.loads((tmp_path / f"o{i}" / "manifest.json").read_text())["mode"] == "beam"
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0][1].decode().splitlines() == lines


@pytest.mark.parametrize(("args", "message"), [
    (["--mono", "missing.de"], "--mono 'missing.de': file not found"),
    (["--beam", "2", "--top-k", "5"], "--top-k: applies to sampling"),
    (["--temperature", "0"], "--temperature: must be positive"),
    (["--chunk-lines", "0"], "--chunk-lines: must be at least 1"),
])
def test_bad_input_is_one_line(reverse_ckpt, mono, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    base = ["backtranslate", "-c", reverse_ckpt, "-o", tmp_path / "o"]
    code, _, err = run_cli(monkeypatch, capsys, *base, *(args if "--mono" in args else ["--mono", mono, *args]))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_other_settings_or_foreign_folder_refused(reverse_ckpt, mono, reference, tmp_path, monkeypatch, capsys):
    code, _, err = _bt(monkeypatch, capsys, reverse_ckpt, mono, reference, "--top-k", "5")
    assert code == 2 and "finished corpus made with other settings" in err and "top_k" in err
    foreign = tmp_path / "f"
    foreign.mkdir()
    (foreign / "train.en").write_text("x\n")
    code, _, err = _bt(monkeypatch, capsys, reverse_ckpt, mono, foreign)
    assert code == 2 and "no progress.json" in err and len(err.strip().splitlines()) == 1
