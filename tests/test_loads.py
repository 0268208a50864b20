"""Each command reads each checkpoint once: `torch.load` is counted (per file) along the real CLI,
in-process, for translate (one model and an ensemble), evaluate, score, export (with its int8
check), plot, train --resume, train --init-from and prepare, and along the serve worker's load
(what its child process runs) and the server's model card (which reads none: the worker sent
what it is made of). Before the one loaded model (mt.deploy.loading), evaluate, export --quantization,
prepare and train --init-from read theirs twice and train --resume its last.pt three times.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_train import copy_run

from mt.cli import main
from mt.config import Config
from mt.train.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tiny_run: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run trained for 2 updates (best.pt, last.pt, metrics.jsonl, config.yaml). Read-only."""
    cfg = copy_run(tiny_run, tmp_path_factory.mktemp("loads"), max_updates=2, valid_every=0, valid_max_sentences=20,
                   keep_checkpoints=0, log_every=1000, threads=1, warmup=2)
    train(cfg)
    return cfg.run_dir


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """torch.load calls from now on, by file name."""
    counts: Counter[str] = Counter()
    real = torch.load

    def counting(f, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        counts[Path(f).name] += 1
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return counts


def mt(monkeypatch: pytest.MonkeyPatch, *args: object) -> None:
    """`mt ARGS` through the real entry point, which must succeed."""
    monkeypatch.setattr(sys, "argv", ["mt", *map(str, args)])
    try:
        main()
    except SystemExit as e:
        assert not e.code, f"mt {' '.join(map(str, args))}: exit {e.code}"


def sentences(multi30k_dir: Path, lang: str, n: int = 12) -> list[str]:
    with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def inference_commands(run: Path, tmp: Path) -> dict[str, tuple[list[object], Counter[str]]]:
    """command -> (its arguments, the torch.load count per file it may make)."""
    best, last = run / "checkpoints" / "best.pt", run / "checkpoints" / "last.pt"
    src, ref = tmp / "src.txt", tmp / "ref.txt"
    one = Counter({"best.pt": 1})
    return {
        "translate": (["translate", "-c", best, "-i", src, "-o", tmp / "hyp.txt", "--device", "cpu"], one),
        "translate (ensemble)": (["translate", "-c", best, "-c", last, "-i", src, "-o", tmp / "ens.txt", "--device",
                                  "cpu"], Counter({"best.pt": 1, "last.pt": 1})),
        "evaluate": (["evaluate", "-c", best, "--src", src, "--ref", ref, "--out-dir", tmp / "eval", "--device", "cpu"],
                     one),
        "score": (["score", "-c", best, "--src", src, "--tgt", ref, "-o", tmp / "scores.txt", "--device", "cpu"], one),
        "plot": (["plot", run, "--attention", "-c", best], one),
    }


@pytest.mark.parametrize("command", ["translate", "translate (ensemble)", "evaluate", "score", "plot"])
def test_inference_commands_read_each_checkpoint_once(command: str, run: Path, multi30k_dir: Path, tmp_path: Path,
                                                      loads: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    if command == "plot":
        copy = tmp_path / "run"
        shutil.copytree(run, copy)  # plot writes into the run directory
        run = copy
    (tmp_path / "src.txt").write_text("\n".join(sentences(multi30k_dir, "en")) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(sentences(multi30k_dir, "de")) + "\n", encoding="utf-8")
    args, expected = inference_commands(run, tmp_path)[command]
    mt(monkeypatch, *args)
    assert loads == expected


@pytest.mark.requires("ctranslate2")
def test_export_with_its_quantization_check_reads_the_checkpoint_once(run: Path, multi30k_dir: Path, tmp_path: Path,
                                                                      loads: Counter[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 check converts the checkpoint once more, to float32, from the same read."""
    from mt.model.checkpoint import load_checkpoint, save_checkpoint

    small = tmp_path / "data"  # a validation set of 12 lines keeps the check short
    small.mkdir()
    for lang in ("en", "de"):
        with gzip.open(small / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(sentences(multi30k_dir, lang)) + "\n")
    state = load_checkpoint(run / "checkpoints" / "best.pt")
    state["config"]["data"]["path"] = str(small)
    save_checkpoint(tmp_path / "best.pt", state)
    loads.clear()
    mt(monkeypatch, "export", tmp_path / "best.pt", "--format", "ctranslate2", "-o", tmp_path / "ct2",
       "--quantization", "int8")
    assert loads == Counter({"best.pt": 1})
    assert "sets" in (tmp_path / "ct2" / "mt_export.json").read_text(encoding="utf-8")  # the check did run


def test_training_reads_its_start_once(run: Path, tmp_path: Path, loads: Counter[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """--resume reads last.pt once (config, tokenizer, weights and training state); a new
    fine-tuning run and `mt prepare` read the init checkpoint once."""
    copy = tmp_path / "runs" / run.name
    shutil.copytree(run, copy)
    config = copy / "config.yaml"
    where = ["--set", f"run_root={tmp_path / 'runs'}"]
    mt(monkeypatch, "train", config, *where, "--resume", "--set", "train.max_updates=3")
    assert loads == Counter({"last.pt": 1})
    loads.clear()
    init = copy / "checkpoints" / "best.pt"
    mt(monkeypatch, "prepare", config, *where, "--set", "name=ft_prepared", "--set", f"train.init_from={init}")
    assert loads == Counter({"best.pt": 1})
    loads.clear()
    mt(monkeypatch, "train", config, *where, "--set", "name=ft", "--init-from", init, "--set", "train.max_updates=1")
    assert loads == Counter({"best.pt": 1})


def test_the_server_reads_the_checkpoint_once_in_its_worker(run: Path, loads: Counter[str]) -> None:
    """The worker's load (what its child runs) reads each file once; the card the HTTP process
    serves is made from what the worker sent, reading no checkpoint."""
    from mt.serve.worker import _load

    _, model = _load([run / "checkpoints" / "best.pt"], "cpu", 1)
    assert loads == Counter({"best.pt": 1})
    card: Callable[[], dict] = model.provenance.card_source.card
    assert card()["update"] == model.update and loads == Counter({"best.pt": 1})
