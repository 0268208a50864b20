"""`make demo` trains what the recipe chooses (`mt train --data`), resumes the run it started, and
trains a given CONFIG instead when one is named. Read from `make -n` (print, do not run) in a copy
of the Makefile beside run folders made up for each case."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MT = ".venv/bin/mt"


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def demo_lines(repo: Path, *args: str) -> list[str]:
    """The `mt train`, `mt evaluate` and `mt plot` commands `make demo ARGS` would run."""
    out = subprocess.run(["make", "-n", "--no-print-directory", "demo", *args], cwd=repo, capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    return [" ".join(line.split()) for line in out.splitlines()
            if line.startswith(f"{MT} train") or line.startswith(f"{MT} evaluate") or line.startswith(f"{MT} plot")]


def make_run(repo: Path, name: str, *files: str) -> None:
    for f in files:
        (repo / "runs" / name / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / "runs" / name / f).write_text("")


def test_fresh_demo_runs_the_recipe_on_multi30k(repo: Path) -> None:
    train, evaluate, plot = demo_lines(repo)
    assert train == f"{MT} train --data data/multi30k --src-lang en --tgt-lang de --budget 20m"
    assert evaluate.startswith(f"{MT} evaluate -c runs/multi30k_en_de/checkpoints/best.pt --split test_2016_flickr")
    assert plot == f"{MT} plot runs/multi30k_en_de --attention"


def test_direction_budget_and_overrides_reach_the_recipe(repo: Path) -> None:
    train, evaluate, _ = demo_lines(repo, "SRC=de", "TGT=en", "BUDGET=5m", "SET=--set train.threads=1")
    assert train == f"{MT} train --data data/multi30k --src-lang de --tgt-lang en --budget 5m --set train.threads=1"
    assert "runs/multi30k_de_en/checkpoints/" in evaluate


def test_a_started_recipe_run_resumes_from_its_own_config(repo: Path) -> None:
    make_run(repo, "multi30k_en_de", "recipe.yaml", "checkpoints/last.pt", "checkpoints/averaged.pt")
    train, evaluate, _ = demo_lines(repo)
    assert train == f"{MT} train runs/multi30k_en_de/recipe.yaml --set train.time_budget=20m --resume"
    assert "runs/multi30k_en_de/checkpoints/averaged.pt" in evaluate  # the averaged one when training wrote it


def test_a_recipe_run_without_a_checkpoint_is_planned_again(repo: Path) -> None:
    make_run(repo, "multi30k_en_de", "recipe.yaml")
    assert demo_lines(repo)[0] == f"{MT} train --data data/multi30k --src-lang en --tgt-lang de --budget 20m"


def test_a_run_trained_from_the_config_resumes_from_it(repo: Path) -> None:
    """A run an older `make demo` trained from configs/multi30k_en_de.yaml has no recipe.yaml."""
    make_run(repo, "multi30k_en_de", "config.yaml", "checkpoints/last.pt")
    assert demo_lines(repo)[0] == f"{MT} train configs/multi30k_en_de.yaml --set train.time_budget=20m --resume"


def test_a_named_config_is_trained_instead_of_the_recipe(repo: Path) -> None:
    train, evaluate, plot = demo_lines(repo, "CONFIG=configs/multi30k_de_en.yaml")
    assert train == f"{MT} train configs/multi30k_de_en.yaml --set train.time_budget=20m"
    assert "runs/multi30k_de_en/checkpoints/best.pt" in evaluate
    assert plot == f"{MT} plot runs/multi30k_de_en --attention"
