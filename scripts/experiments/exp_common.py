"""What the experiments (exp_backtranslate.py, exp_distill.py, and exp_clean.py in part) share:
running the real CLI (`python -m mt ...`, logged per step), several at once, the `mt train`
arguments of one update budget, the checkpoint a run yields, its test BLEU, Multi30k subsets
written as text corpora, and compact copies of checkpoints that fit a transfer limit. Each step
is skipped or continued when an earlier run of the experiment did it (trainings resume from
last.pt, back-translation and distillation from their progress records, evaluations are read
back): after a timeout, run the same command again."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mt.textio import read_lines

REPO = Path(__file__).resolve().parents[2]
TEST = "test_2016_flickr"
SPLITS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
PART_BYTES = 15 * 1024 * 1024  # compact checkpoints are cut into parts below 16 MiB


COMMON_ARGS: dict[str, dict] = {
    "--mirror": {"type": Path, "required": True, "help": "the Multi30k mirror folder ({split}.{lang}.gz)"},
    "--out": {"type": Path, "required": True, "help": "results.json, results.md, runs/, logs/ go here"},
    "--updates": {"type": int, "default": 3000, "help": "update budget of every training"},
    "--device": {"default": "cpu", "help": "cpu | cuda (training, translation, evaluation)"},
    "--jobs": {"type": int, "default": 1, "help": "trainings run at once"},
    "--seed": {"type": int, "default": 1},
    "--eval-beam": {"type": int, "default": 0, "help": "beam for the test BLEU (0 = the config's)"},
    "--set": {"action": "append", "default": [], "help": "extra config override for every training"},
}


def add_common_args(p: argparse.ArgumentParser, flags: tuple[str, ...]) -> None:
    """Add the options every experiment takes (`flags`: the script names them, `COMMON_ARGS` defines them)."""
    for flag in flags:
        p.add_argument(flag, **COMMON_ARGS[flag])


def env(pythonpath: str = "") -> dict[str, str]:
    """The children's environment: `pythonpath` (e.g. a copy of py3langid), then the repository, first."""
    e = dict(os.environ)
    first = str(Path(pythonpath).resolve()) if pythonpath else ""
    e["PYTHONPATH"] = os.pathsep.join(p for p in (first, str(REPO), e.get("PYTHONPATH", "")) if p)
    return e


def run(name: str, args: list[str], out: Path, pythonpath: str = "") -> float:
    """`python -m mt ARGS`, logged to out/logs/NAME.log; seconds taken. Exits naming the log on failure."""
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as f:
        f.write("python -m mt " + " ".join(args) + "\n")
        f.flush()
        proc = subprocess.run([sys.executable, "-m", "mt", *args], cwd=REPO, env=env(pythonpath), stdout=f,
                              stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8").splitlines()[-15:]
        sys.exit(f"{name} failed (exit {proc.returncode}); {log}:\n" + "\n".join(tail))
    seconds = time.perf_counter() - t0
    print(f"{name}: done in {seconds:.0f}s", flush=True)
    return round(seconds, 1)


def parallel(jobs: list[tuple[str, list[str]]], workers: int, out: Path, pythonpath: str = "") -> dict[str, float]:
    """Run the (name, args) jobs, `workers` at a time; seconds per job."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {name: pool.submit(run, name, args, out, pythonpath) for name, args in jobs}
        return {name: f.result() for name, f in futures.items()}


def train_sets(a: argparse.Namespace, out: Path, name: str, data: Path) -> list[str]:
    """The `--set` overrides of one training: its name and data, the shared budget, device and seed."""
    sets = [f"name={name}", f"run_root={out / 'runs'}", f"data.path={data}", f"train.max_updates={a.updates}",
            "train.time_budget=0", f"train.device={a.device}", f"train.seed={a.seed}",
            f"train.threads={max(1, (os.cpu_count() or 1) // max(1, a.jobs))}",
            "train.valid_every=20%"]  # 5 validations a run (at epoch ends, 10k pairs would validate 18 times)
    return [x for s in [*sets, *a.set] for x in ("--set", s)]


def train_job(a: argparse.Namespace, out: Path, name: str, config: Path, data: Path,
              extra: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """(name, `mt train` args) of one training; with `--resume` when the run has a last.pt already, so a
    rerun of the experiment continues an interrupted training and skips a finished one."""
    resume = ["--resume"] if (out / "runs" / name / "checkpoints" / "last.pt").is_file() else []
    return name, ["train", str(config), *train_sets(a, out, name, data), *[x for s in extra for x in ("--set", s)],
                  *resume]


def checkpoint(out: Path, name: str) -> Path:
    """The checkpoint a run yields: averaged.pt when averaging helped, else best.pt, else last.pt."""
    ckpts = out / "runs" / name / "checkpoints"
    for candidate in ("averaged.pt", "best.pt", "last.pt"):
        if (ckpts / candidate).is_file():
            return ckpts / candidate
    sys.exit(f"no checkpoint in {ckpts}")


def bleu(a: argparse.Namespace, out: Path, name: str) -> float:
    """sacreBLEU of run `name` on test_2016_flickr of its own corpus (`mt evaluate`)."""
    eval_dir = out / "eval" / name
    done = sorted(eval_dir.glob("*.json")) if eval_dir.is_dir() else []
    if done:  # evaluated by an earlier run of the experiment
        return float(json.loads(done[0].read_text(encoding="utf-8"))["bleu"])
    args = ["evaluate", "-c", str(checkpoint(out, name)), "--split", TEST, "--out-dir", str(eval_dir),
            "--device", a.device] + (["--beam", str(a.eval_beam)] if a.eval_beam else [])
    run(f"eval_{name}", args, out)
    report = next(eval_dir.glob("*.json"))
    return float(json.loads(report.read_text(encoding="utf-8"))["bleu"])


def bleus(a: argparse.Namespace, out: Path, names: list[str]) -> dict[str, float]:
    """`bleu` of several runs, `a.jobs` evaluations at a time."""
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = {name: pool.submit(bleu, a, out, name) for name in names}
        return {name: f.result() for name, f in futures.items()}


def read_gz(mirror: Path, name: str) -> list[str]:
    """The lines of the mirror's NAME.gz."""
    return read_lines(mirror / f"{name}.gz")


def train_pairs(mirror: Path, limit: int = 0) -> tuple[list[str], list[str]]:
    """The mirror's en and de training lines: the first `limit` pairs (0 = all 29,000)."""
    en, de = read_gz(mirror, "train.en"), read_gz(mirror, "train.de")
    return en[:limit or None], de[:limit or None]


def write_lines(path: Path, lines: list[str]) -> None:
    """Write `lines`, leaving a file that already holds them untouched (its mtime is in cache keys)."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def corpus(mirror: Path, dest: Path, en: list[str], de: list[str]) -> Path:
    """A text corpus folder: these training pairs, and the mirror's validation and test splits."""
    write_lines(dest / "train.en", en)
    write_lines(dest / "train.de", de)
    for split in SPLITS:
        for lang in ("en", "de"):
            if (mirror / f"{split}.{lang}.gz").is_file():
                write_lines(dest / f"{split}.{lang}", read_gz(mirror, f"{split}.{lang}"))
    return dest


def compact_copy(src: Path, dest_dir: Path, name: str) -> dict[str, object]:
    """A weights-only fp32 inference checkpoint of `src` (config, tokenizer, weights: what `mt translate`
    needs) in `dest_dir`, cut into `name.pt.partN` files under 16 MiB (rebuild: `cat name.pt.part* >
    name.pt`); returns its size, sha256 and parts."""
    from mt.model.checkpoint import inference_state, read_checkpoint, save_checkpoint

    ckpt = read_checkpoint(src)
    whole = dest_dir / f"{name}.pt"
    save_checkpoint(whole, inference_state(ckpt.config, ckpt.tokenizer, ckpt.model("cpu")))
    data = whole.read_bytes()
    whole.unlink()
    parts = []
    for i in range(0, len(data), PART_BYTES):
        part = dest_dir / f"{name}.pt.part{i // PART_BYTES}"
        part.write_bytes(data[i:i + PART_BYTES])
        parts.append(part.name)
    digest = hashlib.sha256(data).hexdigest()
    return {"from": str(src), "bytes": len(data), "sha256": digest, "parts": parts}
