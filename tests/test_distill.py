"""`mt distill` end to end on a tiny teacher (conftest's tiny_base): the distilled corpus is the
teacher's beam output on the training sources, the student trains on it with the teacher's
tokenizer, a second run resumes instead of starting over; n-best selection by sentence BLEU;
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_evaluate import run_cli

from mt.config import Config
from mt.data.corpus import read_split
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.decode.translate import search_lines, translate_lines
from mt.deploy.loading import load_model
from mt.eval.bleu import best_by_sentence_bleu
from mt.model.checkpoint import read_checkpoint
from mt.train.distill import Teacher, generate

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
LIMIT = 40


def _student_args(multi30k_dir: Path, root: Path) -> list[str]:
    sets = [f"data.path={multi30k_dir}", f"run_root={root}", f"data.train_limit={LIMIT}", "name=student",
            "model.decoder_layers=1", "train.max_updates=3", "train.valid_every=0", "train.valid_bleu=false",
            "train.warmup=1", "train.threads=1", "train.save_every=0"]
    return [arg for s in sets for arg in ("--set", s)]


def test_distill_end_to_end_and_resume(tiny_base, multi30k_dir, tmp_path, monkeypatch, capsys):
    args = ["distill", TINY, "--teacher", tiny_base, "--beam", "2", "--chunk-lines", "16",
            *_student_args(multi30k_dir, tmp_path)]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    folder = tmp_path / "student" / "distill"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["input_lines"] == LIMIT and manifest["teachers"][0]["sha256"] == read_checkpoint(tiny_base).sha256
    teacher = load_model([tiny_base], "cpu")
    src, _ = read_split(teacher.config.data, "train")
    assert (folder / "train.en").read_text(encoding="utf-8").splitlines() == src[:LIMIT]
    decode = apply_overrides(teacher.config.decode, DecodeOverrides(beam=2, n_best=1))
    expected = translate_lines(teacher.engine, teacher.tokenizer, src[:LIMIT], decode, device="cpu")
    assert (folder / "train.de").read_text(encoding="utf-8").splitlines() == expected
    assert (folder / "val.en").is_file() and (folder / "test_2016_flickr.de").is_file()
    student = read_checkpoint(tmp_path / "student" / "checkpoints" / "last.pt")
    assert student.tokenizer.model_bytes() == teacher.tokenizer.model_bytes()  # the teacher's, not a new one
    assert student.config.model.decoder_layers == 1 and student.update == 3
    assert student.config.data.path == str(folder)
    code, out, err = run_cli(monkeypatch, capsys, *args)  # again: nothing translated twice, training resumed
    assert code == 0, err
    assert "is complete; not translated again" in out and "resuming the student" in out


def test_select_bleu_keeps_the_closest_of_the_nbest(tiny_base, tiny_config, tmp_path):
    import dataclasses

    loaded = load_model([tiny_base], "cpu")
    teacher = Teacher(loaded.engine, loaded.tokenizer, loaded.config, loaded.device, [{"path": "t", "sha256": "x"}])
    cfg: Config = dataclasses.replace(tiny_config, data=dataclasses.replace(tiny_config.data, train_limit=12))
    decode = apply_overrides(loaded.config.decode, DecodeOverrides(n_best=3))
    folder = generate(cfg, teacher, decode, select_bleu=True, chunk_lines=5, report=lambda _: None)
    src, ref = read_split(cfg.data, "train")
    nbest = search_lines(loaded.engine, loaded.tokenizer, src[:12], decode, n_best=decode.search.n_best, device="cpu").nbest()
    got = (folder / "train.de").read_text(encoding="utf-8").splitlines()
    assert got == [n[best_by_sentence_bleu([t for t, _ in n], r, "13a")][0] for n, r in zip(nbest, ref)]
    assert json.loads((folder / "manifest.json").read_text())["select"] == "sentence_bleu"


@pytest.mark.parametrize(("extra", "message"), [
    (["--select-bleu"], "--select-bleu: needs --n-best N"),
    (["--n-best", "3"], "--n-best: the student learns one translation"),
    (["--set", "data.src_lang=de", "--set", "data.tgt_lang=en"], "the teacher translates en-de, the student config de-en"),
    (["--chunk-lines", "0"], "--chunk-lines: must be at least 1"),
])
def test_bad_input_is_one_line(tiny_base, multi30k_dir, tmp_path, monkeypatch, capsys, extra, message):
    code, _, err = run_cli(monkeypatch, capsys, "distill", TINY, "--teacher", tiny_base,
                           *_student_args(multi30k_dir, tmp_path), *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_bench_student_runs(multi30k_dir, tmp_path):
    """scripts/bench/bench_student.py on two tiny shapes (figures not checked: speed is measured, not unit-tested)."""
    import subprocess
    import sys

    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(TINY.parents[1] / "scripts" / "bench" / "bench_student.py"), str(TINY), str(TINY),
                           "--data", str(multi30k_dir), "--limit", "3", "--repeat", "1", "--out-len", "3", "--train-pairs", "2000",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 2 and rows[0]["shape"] == "d64 2+2 ff128" and rows[0]["greedy_one_sent_s"] > 0
    assert "| tiny.yaml | d64 2+2 ff128 |" in proc.stdout
