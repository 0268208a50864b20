"""Sampling, ensembles and `mt score` through the real CLI entry point (in-process), on the tiny
random checkpoint of test_evaluate.py and a second one with other weights."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from test_evaluate import ckpt, run_cli, small_data, val_lines  # noqa: F401  (fixtures)

from mt.config_load import load_config
from mt.data.tokenizer import EOS_ID, Tokenizer
from mt.decode.engine import NativeEngine
from mt.decode.forced import score_pairs
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.decode.translate import translate_lines, translate_texts
from mt.errors import MTError
from mt.model.checkpoint import inference_state, load_checkpoint, load_for_inference, save_checkpoint
from mt.model.ensemble import Ensemble, max_positions
from mt.model.transformer import Transformer
from mt.text.segment import segmenter_for

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpt2(ckpt: Path) -> Path:  # noqa: F811
    """Another random model with the same tokenizer and config (an ensemble partner)."""
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    torch.manual_seed(1)
    other = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint)
    with torch.no_grad():
        other.tgt_embed.weight[EOS_ID] = 0.0
    path = ckpt.parent / "other.pt"
    save_checkpoint(path, inference_state(cfg, tokenizer, other))
    return path


@pytest.fixture
def source(small_data: Path, tmp_path: Path) -> tuple[Path, list[str]]:  # noqa: F811
    lines = val_lines(small_data)
    lines.insert(3, "")
    path = tmp_path / "in.en"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def test_sampling_same_seed_same_file_other_seed_other_file(ckpt, source, tmp_path, monkeypatch, capsys):  # noqa: F811
    inp, lines = source

    def sample(name: str, *extra: object) -> list[str]:
        out = tmp_path / name
        code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp, "-o", out, "--sampling",
                               "--top-p", "0.9", *extra)
        assert code == 0, err
        return out.read_text(encoding="utf-8").splitlines()

    first = sample("s1.txt", "--seed", "1")
    assert len(first) == len(lines) and first[3] == ""
    assert sample("s1b.txt", "--seed", "1") == first
    assert sample("s1c.txt", "--seed", "1", "--max-tokens", "7") == first  # other batching, same samples
    assert sample("s2.txt", "--seed", "2") != first
    # stdin, one line at a time in the pipe, gives the same lines as the file
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    decode = apply_overrides(cfg.decode, DecodeOverrides(sampling=True, top_p=0.9, seed=1))
    alone = [translate_lines(model, tokenizer, [line], decode, device="cpu", first_id=i)[0]
             for i, line in enumerate(lines)]
    assert alone == first
    # the greedy search as it is (a sample is never searched again for a loop: NativeEngine.loops)
    greedy = translate_lines(NativeEngine(model, "cpu"), tokenizer, lines, dataclasses.replace(decode, search=dataclasses.replace(decode.search, sampling=False, beam=1)), device="cpu")
    assert greedy != first  # sampling is not search
    cold = sample("cold.txt", "--temperature", "1e-6")
    assert cold == greedy


def test_sampling_nbest_draws_n_samples(ckpt, source, monkeypatch, capsys):  # noqa: F811
    inp, lines = source
    code, stdout, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp, "--sampling", "--n-best", "4",
                                "--seed", "3", "--top-k", "50")
    assert code == 0, err
    rows = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})", line) for line in stdout.splitlines()]
    assert all(rows), stdout
    by_line: dict[int, list[float]] = {}
    for m in rows:
        by_line.setdefault(int(m.group(1)), []).append(float(m.group(3)))
    assert sorted(by_line) == list(range(len(lines)))
    assert by_line[3] == [0.0]
    assert all(len(v) == 4 and v == sorted(v, reverse=True) for i, v in by_line.items() if i != 3)
    texts = {m.group(2) for m in rows if m.group(1) == "0"}
    assert len(texts) > 1  # four draws of one sentence are not all the same


def test_flag_checks_and_config_ranges(ckpt, source, monkeypatch, capsys):  # noqa: F811
    inp, _ = source

    def fails(*args: object, needle: str) -> None:
        code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp, *args)
        assert code == 2 and err.startswith("mt: error: ") and err.count("\n") == 1, err
        assert needle in err, err

    fails("--temperature", "0.5", needle="--temperature")  # without --sampling
    fails("--seed", "3", needle="--sampling")
    fails("--sampling", "--temperature", "0", needle="--temperature")
    fails("--sampling", "--top-k", "-1", needle="--top-k")
    fails("--sampling", "--top-p", "1.5", needle="--top-p")
    fails("--sampling", "--beam", "4", needle="--beam")
    base = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    for key, value in (("temperature", "0"), ("top_k", "-3"), ("top_p", "0"), ("top_p", "1.2")):
        with pytest.raises(MTError, match=f"decode.search.{key}"):
            load_config(base, [f"decode.{key}={value}"])
    cfg = load_config(base, ["decode.sampling=true", "decode.n_best=8", "decode.top_p=0.9"])
    assert cfg.decode.search.sampling and cfg.decode.search.n_best == 8  # samples may exceed the beam


def test_ensemble_translate_and_evaluate(ckpt, ckpt2, small_data, source, tmp_path, monkeypatch, capsys):  # noqa: F811
    inp, lines = source
    code, single, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", inp)
    assert code == 0, err
    code, twice, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-c", ckpt, "-i", inp)
    assert code == 0, err
    assert twice == single  # an ensemble of two copies is the model
    code, mixed, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-c", ckpt2, "-i", inp)
    assert code == 0, err
    a, tok, cfg = load_for_inference(ckpt, "cpu")
    b, _, _ = load_for_inference(ckpt2, "cpu")
    decode = apply_overrides(cfg.decode, DecodeOverrides())
    segmenter = segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang)  # mt translate splits lines into sentences
    assert mixed.splitlines() == translate_texts(Ensemble([a, b]), tok, lines, decode, device="cpu", segmenter=segmenter)
    assert mixed != single

    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "-c", ckpt2, "--split", "val",
                             "--out-dir", tmp_path / "ev")
    assert code == 0, err
    assert "ensemble of 2 checkpoints" in out
    report = json.loads((tmp_path / "ev" / "val.model+other.beam2.json").read_text(encoding="utf-8"))
    assert [Path(c["path"]).name for c in report["checkpoints"]] == ["model.pt", "other.pt"]
    assert all(len(c["sha256"]) == 64 for c in report["checkpoints"])

    # a checkpoint with another tokenizer cannot join: one line naming both files
    state = load_checkpoint(ckpt2)
    split_tok = Tokenizer.from_bytes(state["tokenizer"]["src"], state["tokenizer"]["src"])
    torch.manual_seed(2)
    stranger = Transformer(cfg.model, split_tok.src_vocab_size, split_tok.tgt_vocab_size, joint_vocab=False)
    save_checkpoint(tmp_path / "stranger.pt", inference_state(cfg, split_tok, stranger))
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-c", tmp_path / "stranger.pt", "-i", inp)
    assert code == 2 and err.count("\n") == 1 and "model.pt" in err and "stranger.pt" in err, err


def test_score_command(ckpt, ckpt2, small_data, tmp_path, monkeypatch, capsys):  # noqa: F811
    src, tgt = small_data / "val.en", small_data / "val.de"
    code, stdout, err = run_cli(monkeypatch, capsys, "score", "-c", ckpt, "--src", src, "--tgt", tgt)
    assert code == 0, err
    rows = [line.split("\t") for line in stdout.splitlines()]
    assert len(rows) == len(val_lines(small_data)) and all(len(r) == 2 for r in rows)
    model, tok, cfg = load_for_inference(ckpt, "cpu")
    expected = score_pairs(model, tok, val_lines(small_data), val_lines(small_data, "de"), cfg.decode,
                           max_positions=max_positions(model), device="cpu")
    assert [float(r[0]) for r in rows] == pytest.approx([s.log_prob for s in expected], abs=1e-3)
    assert [float(r[1]) for r in rows] == pytest.approx([s.per_token for s in expected], abs=1e-3)

    out = tmp_path / "scores.tsv"
    code, _, err = run_cli(monkeypatch, capsys, "score", "-c", ckpt, "-c", ckpt2, "--src", src, "--tgt", tgt,
                           "-o", out, "--normalize")
    assert code == 0, err
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(expected) and all(len(r) == 3 for r in rows)
    assert [float(r[0]) for r in rows] != pytest.approx([s.log_prob for s in expected], abs=1e-3)  # the ensemble's

    short = tmp_path / "short.de"
    short.write_text("Ein Hund.\n", encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, "score", "-c", ckpt, "--src", src, "--tgt", short)
    assert code == 2 and err.count("\n") == 1 and "val.en" in err and "short.de" in err, err


def _mt_subprocess(command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `command` in bash with "$MT" standing for this interpreter's `python -m mt` (as a shell user would)."""
    env = {**os.environ, "MT": f"{sys.executable} -m mt", "OMP_NUM_THREADS": "1",  # as the in-process one_thread
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout, env=env)


def test_input_from_process_substitution_pipe_and_dev_null(ckpt, tmp_path):  # noqa: F811
    """`-i <(zcat corpus.gz)`, a named pipe and /dev/null are input like a file; a folder is one clear line."""
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    lines = ["A dog.", "", "Two men are playing football on the grass."]
    want = translate_texts(model, tokenizer, lines, cfg.decode, device="cpu",  # mt translate's text, rules and all
                           segmenter=segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang))
    text = "".join(line + "\n" for line in lines)
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    subprocess.run(["gzip", "-k", str(tmp_path / "in.txt")], check=True)

    proc = _mt_subprocess(f"$MT translate -c '{ckpt}' -i <(zcat '{tmp_path / 'in.txt.gz'}')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == [*want, ""]

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(text,), kwargs={"encoding": "utf-8"}, daemon=True)
    writer.start()  # blocks in open() until mt opens the pipe for reading
    proc = _mt_subprocess(f"$MT translate -c '{ckpt}' -i '{fifo}' -o '{tmp_path / 'out.txt'}'")
    writer.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n") == [*want, ""]

    proc = _mt_subprocess(f"$MT translate -c '{ckpt}' -i /dev/null")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr

    proc = _mt_subprocess(f"$MT translate -c '{ckpt}' -i '{tmp_path}'")
    assert proc.returncode == 2 and proc.stderr.strip() == f"mt: error: input '{tmp_path}': is a folder"
    proc = _mt_subprocess(f"$MT translate -c '{ckpt}' -i '{tmp_path / 'missing.txt'}'")
    assert proc.returncode == 2 and proc.stderr.strip() == f"mt: error: input '{tmp_path / 'missing.txt'}': file not found"
