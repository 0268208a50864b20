"""`make demo` trains what the recipe chooses (`mt train --data`), resumes the run it started, and
trains a given CONFIG instead when one is named. Read from `make -n` (print, do not run) in a copy
of the Makefile beside run folders made up for each case."""

from __future__ import annotations

import re
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


def test_install_adds_the_extras_the_readme_uses(repo: Path) -> None:
    """Documents (files), mt serve (serve), glossary lemmas (terms) and CTranslate2 export (ct2):
    each README command works right after `make demo`; each extra is one pyproject.toml declares
    (pip only warns about an unknown one)."""
    out = subprocess.run(["make", "-n", "-B", "--no-print-directory", ".venv/.installed"], cwd=repo,
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    line = next(w for w in out.splitlines() if "pip install --quiet -e" in w)
    extras = line.split('".[', 1)[1].split(']"', 1)[0].split(",")
    assert set(extras) == {"files", "serve", "terms", "ct2"}
    section = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.optional-dependencies]", 1)[1]
    declared = set(re.findall(r"^(\w+) = ", section.split("\n[", 1)[0], flags=re.M))
    assert set(extras) <= declared, declared


def test_demo_ends_saying_how_to_put_mt_on_path(repo: Path) -> None:
    out = subprocess.run(["make", "-n", "--no-print-directory", "demo"], cwd=repo, capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip().splitlines()
    assert ". .venv/bin/activate" in out[-1]


def test_browser_deps_says_what_it_installs_and_why_before_it_does(repo: Path, tmp_path: Path) -> None:
    """Run against stand-ins for id and apt-get (which records its calls and "installs" stand-ins
    for the programs): the announcement, with each package and the test it is for, comes first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"

    def stub(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)

    stub("id", "echo 0")
    stub("apt-get", f'echo "apt-get $*" >> {log}; echo "APT-GET $1"; '
                    f'for p in chromium chromedriver msgfmt java; do printf "#!/bin/sh\\n" > {bin_dir}/$p; '
                    f'/bin/chmod +x {bin_dir}/$p; done')
    make = shutil.which("make")
    result = subprocess.run([make, "--no-print-directory", "browser-deps"], cwd=repo, capture_output=True, text=True,
                            env={"PATH": str(bin_dir)})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "apt-get install -y chromium chromium-driver gettext default-jre-headless" in log.read_text()
    announced = out[:out.index("APT-GET update")]
    for package, why in (("chromium chromium-driver", "tests/test_page.py"), ("gettext", "msgfmt"),
                         ("default-jre-headless", "EPUBCheck")):
        assert package in announced and why in announced, (package, announced)
