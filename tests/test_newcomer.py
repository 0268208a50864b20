"""A newcomer on a fresh clone (issue 71): `make demo`, then every runnable shell block of README.md
and of the docs/ pages, each in a fresh shell that puts `mt` on PATH the way the README's
Quickstart says (`. .venv/bin/activate`). A block that cannot run here is marked as an
illustration, with its reason (tests/test_docs.py: `Block`); every other block runs as written,
and a documented command or flag that breaks fails this test.

It reuses what the suite already has, to stay cheap:
- the virtual environment running the tests: the copy's `.venv` is a link to it, and `make` finds
  it installed (its stamp newer than the copy's pyproject.toml), so nothing is installed;
- the Multi30k mirror (`make demo` copies the corpus from `MT_DATA_MIRROR`);
- a tiny demo: `make demo` with configs/tiny.yaml, 10 updates and one test set, under the run name
  the README's commands use (runs/multi30k_en_de), instead of 20 minutes of the recipe's model.
Files the pages say stand for the reader's own (`input.en`, `film.srt`, `terms.tsv`, ...) are
written as small examples before the blocks run. The copy runs its own code: PYTHONPATH is the
copy, so the test checks this checkout even where the environment's editable install points
elsewhere. Nothing here depends on wall-clock speed.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import DOCUMENTS, NOT_YET_MARKED, ROOT, SHELL_LANGS, Block, _blocks, _simple_commands

pytestmark = pytest.mark.slow

# The pages whose blocks run here: README.md and every page of the site (but NOT_YET_MARKED's).
PAGES = [p for p in DOCUMENTS if p.name == "README.md" and p.parent == ROOT or p.is_relative_to(ROOT / "docs")]

# `make demo` in minutes' stead: the tiny config (trains in seconds), no validation decode, outputs
# of at most 4 pieces (a model of 10 updates would fill every output to its length limit, and the
# pages' commands would spend their time decoding noise), the smallest test set, and the run name
# the README's commands use.
DEMO = ["make", "demo", "CONFIG=configs/tiny.yaml", "NAME=multi30k_en_de", "BUDGET=1m",
        "SET=--set name=multi30k_en_de --set train.max_updates=10 --set train.valid_every=0 "
        "--set train.valid_bleu=false --set decode.max_len_a=0 --set decode.max_len_b=4",
        "TEST_SPLITS=--split test_2017_mscoco"]

SRT = """1
00:00:01,000 --> 00:00:03,500
A man rides a bike.

2
00:00:04,000 --> 00:00:06,000
Two dogs play in the snow.
"""
PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: de\\n"

msgid "A dog runs in the park."
msgstr ""

msgid "Save the file"
msgstr ""
"""


def your_files(multi30k: Path) -> dict[str, str]:
    """Small examples of the files the pages say are the reader's own."""
    def lines(name: str, n: int) -> list[str]:
        with gzip.open(multi30k / name, "rt", encoding="utf-8") as f:
            return [next(f).rstrip("\n") for _ in range(n)]

    refs = lines("test_2016_flickr.de.gz", 30)
    english = lines("test_2016_flickr.en.gz", 3)
    return {
        "input.en": "\n".join(english) + "\n",
        "sentences.en": "\n".join(english) + "\n",
        "in.txt": "A cat sits on the table.\nA woman reads a book on Mastodon.\n",
        "terms.tsv": "cat\tKatze\nMastodon\n",
        "film.srt": SRT,
        "messages.po": PO,
        "test.de": "\n".join(refs) + "\n",
        "new.de": "\n".join(refs[:15] + [" ".join(r.split()[:-1]) for r in refs[15:]]) + "\n",
        "baseline.de": "\n".join(" ".join(r.split()[:-1]) for r in refs) + "\n",
        "data/crawl/train.en": "\n".join(lines("train.en.gz", 200) + ["www.example.com", "A dog."] * 3) + "\n",
        "data/crawl/train.de": "\n".join(lines("train.de.gz", 200) + ["www.example.com", "A dog."] * 3) + "\n",
    }


def runnable_blocks() -> list[Block]:
    """The shell blocks of README.md and docs/ that are not marked as illustrations, in page order."""
    return [b for p in PAGES if str(p.relative_to(ROOT)) not in NOT_YET_MARKED
            for b in _blocks(p) if b.lang in SHELL_LANGS and not b.illustration]


def activation() -> str:
    """How the README's Quickstart puts `mt` on PATH (its `. .venv/bin/activate` line)."""
    quick = (ROOT / "README.md").read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("```bash", 1)[1]
    found = [line.split("#")[0].strip() for line in quick.split("```", 1)[0].splitlines()
             if re.match(r"\s*(\.|source) \S*activate", line)]
    assert found, "README.md's Quickstart no longer says how to put mt on PATH"
    return found[0]


def copy_repository(dest: Path) -> None:
    """The files a clone has (tracked, and new ones git does not ignore), without the run outputs."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=False)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            if (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:  # not a git checkout: the tree without what git would ignore here
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "runs", "site", "__pycache__", ".pytest_cache", "*.gz", "exported*"))


def link_environment(copy: Path) -> None:
    """The copy's .venv is the running one; make must find it installed, or it would install into it."""
    venv = Path(sys.prefix)
    stamp = venv / ".installed"
    if venv == Path(sys.base_prefix) or not stamp.is_file():
        pytest.fail(f"tests/test_newcomer.py reuses the virtual environment `make install` made ({venv} has no "
                    f".installed stamp): run the suite as `make test` does, with .venv/bin/python", pytrace=False)
    (copy / ".venv").symlink_to(venv, target_is_directory=True)
    before = stamp.stat().st_mtime - 60
    os.utime(copy / "pyproject.toml", (before, before))  # installed after the clone, as on a fresh machine


def fresh_env(copy: Path, mirror: Path) -> dict[str, str]:
    """A new login's environment: no virtual environment on PATH, no make or pytest variables."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(copy)), "LANG": "C.UTF-8",
            "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "OMP_NUM_THREADS": "1", "MT_DATA_MIRROR": str(mirror),
            "PYTHONPATH": str(copy)}


def written(block: Block) -> list[str]:
    """What the block's `mt` commands are told to write (-o FILE or FOLDER; not stdout)."""
    return [value for words in _simple_commands(block.text) if words[0] == "mt"
            for flag, value in zip(words, words[1:]) if flag in ("-o", "--output") and value != "-"]


def _empty(path: Path) -> bool:
    return not path.exists() or (path.is_file() and not path.stat().st_size) or (path.is_dir() and not any(path.iterdir()))


def test_make_demo_then_every_runnable_block(mirror_dir: Path, tmp_path: Path) -> None:
    mirror = mirror_dir  # a data test: fails without Multi30k, skipped in the offline subset (conftest.py)
    copy = tmp_path / "mt"
    copy.mkdir()
    copy_repository(copy)
    link_environment(copy)
    env = fresh_env(copy, mirror)
    up_to_date = subprocess.run(["make", "--question", "install"], cwd=copy, env=env, capture_output=True, text=True)
    assert up_to_date.returncode == 0, f"make would install into the running environment: {up_to_date.stdout}"

    demo = subprocess.run(DEMO, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, f"make demo failed:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    assert (copy / "runs/multi30k_en_de/checkpoints/best.pt").is_file()
    last = demo.stdout.strip().splitlines()[-2:]
    assert any(activation() in line for line in last), f"make demo's last lines do not say how to put mt on PATH: {last}"
    found = subprocess.run(["bash", "--noprofile", "--norc", "-c", f"{activation()} && command -v mt"], cwd=copy,
                           env=env, capture_output=True, text=True)
    # (the activate script names the environment by its own path, so the link's target is what PATH gets)
    assert found.returncode == 0 and Path(found.stdout.strip()).resolve() == (copy / ".venv/bin/mt").resolve(), found

    for name, text in your_files(mirror).items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text, encoding="utf-8")
    blocks = runnable_blocks()
    assert len(blocks) >= 8, [b.where() for b in blocks]
    failed = []
    for block in blocks:
        script = f"{activation()}\n{block.text}\n"
        run = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script], cwd=copy,
                             env=env, capture_output=True, text=True, timeout=600)
        missing = [f for f in written(block) if _empty(copy / f)]
        if run.returncode != 0 or missing:
            failed.append(f"{block.where()}: exit {run.returncode}, missing output {missing}\n"
                          f"{run.stdout[-1500:]}\n{run.stderr[-1500:]}")
    assert not failed, "documented commands that do not run as written:\n\n" + "\n\n".join(failed)


def test_the_runnable_blocks_are_the_readers_first_steps():
    """The README's and the getting-started page's everyday commands run (translate, evaluate,
    documents, glossaries, cleaning, comparing, exporting), not only trivia."""
    text = "\n".join(b.text for b in runnable_blocks())
    for command in ("mt translate", "mt evaluate", "--glossary", "film.srt", "messages.po", "mt data clean",
                    "--hyp", "mt export", "mt --help"):
        assert command in text, f"no runnable block runs {command}"
    where = {b.path.relative_to(ROOT).as_posix() for b in runnable_blocks()}
    assert {"README.md", "docs/getting-started.md"} <= where


@pytest.mark.parametrize(("module", "extra", "argv"), [
    ("polib", "files", ["translate", "-c", "{ckpt}", "-i", "{tmp}/messages.po", "-o", "{tmp}/messages.de.po"]),
])
def test_a_command_without_its_extra_names_the_extra_in_one_line(random_ckpt: Path, tmp_path: Path, module: str,
                                                                  extra: str, argv: list[str]) -> None:
    """Issue 71: a reader who installed without an extra (`pip install -e .`) is told which one, in
    one line. (mt serve's and mt export's are checked in tests/test_serve.py and tests/test_export.py.)"""
    (tmp_path / "messages.po").write_text(PO, encoding="utf-8")
    args = [a.format(ckpt=random_ckpt, tmp=tmp_path) for a in argv]
    code = f"import sys; sys.modules[{module!r}] = None; sys.argv = ['mt', *{args!r}]; from mt.cli import main; main()"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f'pip install -e ".[{extra}]"' in lines[0] and module in lines[0], lines[0]
