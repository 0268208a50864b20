"""The whole pipeline through the real CLI, as a user runs it, on a 2,000-sentence Multi30k slice.

fetch (mirror) -> prepare -> train (150 updates) -> translate -> evaluate -> average -> plot,
then every artefact is reloaded. Each command runs as its own `python -m mt` process. Training is
bounded by updates, not time, so a slow or busy machine trains the same model as a fast one
(time budgets are tested with a fake clock: test_horizon.py).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY_YAML = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def mt(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "mt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"mt {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.slow
def test_fetch_prepare_train_translate_evaluate(tmp_path: Path, mirror_dir: Path) -> None:
    data = tmp_path / "data" / "multi30k"
    mt("data", "fetch", "multi30k", "--dest", str(data), "--mirror", str(mirror_dir), cwd=tmp_path)
    assert sorted(p.name for p in data.glob("*.gz")) == sorted(
        f"{s}.{lang}.gz" for s in ["train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
        for lang in ["en", "de", "fr"])

    sets = ["--set", f"data.path={data}", "--set", f"run_root={tmp_path / 'runs'}",
            "--set", "train.max_updates=150", "--set", "train.valid_every=150",
            "--set", "train.save_every=50", "--set", "train.average_last=3", "--set", "train.threads=1"]
    mt("prepare", str(TINY_YAML), *sets, cwd=tmp_path)
    run = tmp_path / "runs" / "tiny"
    for name in ["config.yaml", "spm.model", "data/manifest.json", "data/train.src.ids", "data/val.tgt.offsets"]:
        assert (run / name).is_file(), name

    mt("train", str(TINY_YAML), *sets, cwd=tmp_path)
    ckpts = run / "checkpoints"
    assert (ckpts / "last.pt").is_file() and (ckpts / "best.pt").is_file()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(r["update"] for r in records) == 150
    assert any(r["kind"] == "valid" and r["update"] == 150 and r["bleu"] > 0 for r in records)
    assert sorted(p.name for p in ckpts.glob("update_*.pt")) == ["update_100.pt", "update_150.pt", "update_50.pt"]
    averaged = [r for r in records if r["kind"] == "averaged"]
    assert [r["sources"] for r in averaged] == [["update_50.pt", "update_100.pt", "update_150.pt"]]
    if (ckpts / "averaged.pt").is_file():  # kept when it validated at least as well as best.pt
        from mt.model.checkpoint import load_checkpoint

        state = load_checkpoint(ckpts / "averaged.pt")
        assert (state["update"], state["averaged_updates"]) == (150, [50, 100, 150])
        assert {k: state["valid"][k] for k in ("loss", "bleu")} == {k: averaged[0][k] for k in ("loss", "bleu")}

    # translate: same line count and order, empty line kept empty.
    with gzip.open(data / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(20)]
    lines.insert(5, "")
    (tmp_path / "in.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    mt("translate", "-c", str(ckpts / "best.pt"), "-i", "in.en", "-o", "out.de", "--beam", "2", cwd=tmp_path)
    out = (tmp_path / "out.de").read_text(encoding="utf-8").split("\n")[:-1]
    # A 150-update model may end some sentence at once (an empty translation); the contract is the
    # line count and order, and an empty input line giving an empty output line.
    assert len(out) == len(lines) and out[5] == "" and sum(bool(x) for x in out) >= len(lines) // 2

    # evaluate on a test split: a JSON report with BLEU > 0 and its hypotheses.
    mt("evaluate", "-c", str(ckpts / "best.pt"), "--split", "test_2016_flickr", "--beam", "2",
       "--out-dir", "eval", cwd=tmp_path)
    reports = list((tmp_path / "eval").glob("*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["bleu"] > 0 and report["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert len(Path(report["hypotheses"]).read_text(encoding="utf-8").splitlines()) == 1000

    # average two periodic checkpoints; the result translates.
    mt("average", str(ckpts / "update_100.pt"), str(ckpts / "update_150.pt"), "-o", "avg.pt", cwd=tmp_path)
    from mt.model.checkpoint import load_checkpoint

    avg = load_checkpoint(tmp_path / "avg.pt")
    assert (avg["update"], avg["averaged_updates"], "valid" in avg) == (150, [100, 150], False)
    mt("translate", "-c", "avg.pt", "-i", "in.en", "-o", "avg.de", cwd=tmp_path)
    assert len((tmp_path / "avg.de").read_text(encoding="utf-8").split("\n")[:-1]) == len(lines)

    # plots.
    mt("plot", str(run), "--attention", cwd=tmp_path)
    for name in ["curves.png", "attention.png"]:
        assert (run / "plots" / name).read_bytes()[:4] == b"\x89PNG"

    # artefacts reload in-process.
    from mt.data.splits import load_split
    from mt.model.checkpoint import load_for_inference

    model, tokenizer, cfg = load_for_inference(ckpts / "best.pt", "cpu")
    assert cfg.name == "tiny" and model.num_parameters() > 0
    assert len(load_split(run, "train")) == 2000


def test_user_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    cases = [
        ("train", str(TINY_YAML), "--set", "train.lrr=1"),  # unknown key
        ("train", str(TINY_YAML), "--set", "model.heads=three"),  # wrong type
        ("prepare", "missing.yaml"),  # missing config
        ("translate", "-c", "missing.pt", "-i", "-"),  # missing checkpoint
        ("plot", str(tmp_path)),  # a run directory without metrics
    ]
    for args in cases:
        proc = mt(*args, cwd=tmp_path, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mt: error: "), (args, proc.stderr)
