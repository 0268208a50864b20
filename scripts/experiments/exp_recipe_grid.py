"""The grid around the recipe's choices (issue 44): at each corpus size, every combination of
model size, dropout, label smoothing and vocabulary size, each trained for the updates that a CPU
time budget buys at that model size, scored on test_2016_flickr (beam 5, the averaged checkpoint
when it validated better) and on the run's best validation (greedy, <= 300 sentences).

    python scripts/experiments/exp_recipe_grid.py --mirror ../shared/data/multi30k --out exp/grid \\
        --sizes 1000 3000 10000 --updates 128=1500 192=840 --jobs 15 --set train.threads=1

Why updates and not minutes: the question is which keys are best for a 4-minute CPU budget, and
a budget of minutes buys a model size a number of updates (measured on the CPU, `--updates`:
d_model=updates). Fixed update counts let a faster machine (a GPU, many cores) run the CPU's grid
in a fraction of the time with the same result, up to the device's rounding. Every trial starts
from the recipe's own config for its corpus (`mt train --data FOLDER --dry-run`), then sets the
grid's keys, `train.max_updates` and no time budget, so warmup, validation and checkpoint cadence
scale with the run as the recipe's percentages say.

Corpora as scripts/experiments/exp_recipe.py makes them (seeded Multi30k samples with val and the test set).
Each finished trial is a line of results.jsonl; a trial already there is skipped, so after a
timeout the same command continues. results.md: one table per corpus, best test BLEU first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from mt.train.recipe import LADDER

if __package__:  # imported as scripts.experiments.exp_recipe_grid (tests/test_bench_scripts.py)
    from .exp_recipe import evaluate, make_corpus, mt
else:  # run as a script: this folder is on sys.path
    from exp_recipe import evaluate, make_corpus, mt

MODELS = {r.d_model: (r.heads, r.d_ff) for r in LADDER}  # d_model -> (heads, d_ff), the recipe's rungs


def base_config(a: argparse.Namespace, key: str, data: Path, src: str, tgt: str) -> Path:
    """The recipe's config for this corpus (what `mt train --data` would train), written once."""
    path = a.out / "runs" / f"base_{key}" / "recipe.yaml"
    if not path.is_file():
        sets = ["--set", f"name=base_{key}", "--set", f"run_root={a.out / 'runs'}"]
        if mt(["train", "--data", str(data), "--src-lang", src, "--tgt-lang", tgt, "--budget", a.budget,
               "--dry-run", *sets], a.out / "logs" / f"base_{key}.log").returncode:
            raise SystemExit(f"base_{key}: the dry run failed; see {a.out / 'logs'}")
    return path


def trials(a: argparse.Namespace, vocab: int) -> list[dict]:
    """Every combination of the grid's axes; vocab given as multiples of the recipe's choice."""
    out = []
    for d, dropout, smoothing, scale in itertools.product(a.models, a.dropout, a.smoothing, a.vocab_scale):
        heads, d_ff = MODELS[d]
        v = int(round(vocab * scale / 500)) * 500
        out.append({"name": f"d{d}_do{dropout}_ls{smoothing}_v{v}", "d_model": d, "dropout": dropout,
                    "smoothing": smoothing, "vocab": v, "vocab_scale": scale, "updates": a.updates[d],
                    "set": [f"model.d_model={d}", f"model.heads={heads}", f"model.d_ff={d_ff}",
                            f"model.dropout={dropout}", "model.attention_dropout=0.1",
                            f"train.label_smoothing={smoothing}", f"tokenizer.vocab_size={v}",
                            f"train.max_updates={a.updates[d]}", "train.time_budget=0"]})
    return out


def train_and_score(a: argparse.Namespace, key: str, base: Path, data: Path, t: dict) -> dict | None:
    name = f"{key}_{t['name']}"
    run = a.out / "runs" / name
    log = a.out / "logs" / f"{name}.log"
    sets = [f"name={name}", f"run_root={a.out / 'runs'}", f"data.path={data}", *t["set"], *a.set]
    t0 = time.time()
    if not (run / "done").is_file():
        if mt(["train", str(base), *[x for s in sets for x in ("--set", s)]], log).returncode:
            print(f"{name}: training failed; see {log}", flush=True)
            return None
        (run / "done").write_text("")
    try:
        scored = evaluate(a, name)  # the averaged checkpoint when it validated better, beam 5
    except SystemExit as e:
        print(e, flush=True)
        return None
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    valid = [r["bleu"] for r in records if r.get("kind") in ("valid", "averaged") and "bleu" in r]
    return {**{k: v for k, v in t.items() if k != "set"}, "corpus": key, "test_bleu": scored["bleu"],
            "best_valid_bleu": round(max(valid), 2) if valid else None, "checkpoint": scored["checkpoint"],
            "seconds": round(time.time() - t0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=[3000, 10000])
    p.add_argument("--directions", nargs="+", default=["en-de"])
    p.add_argument("--budget", default="4m", help="the CPU budget the base config is chosen for")
    p.add_argument("--updates", nargs="+", required=True, help="d_model=updates the CPU budget buys, e.g. 128=1500")
    p.add_argument("--models", type=int, nargs="+", default=[128, 192])
    p.add_argument("--dropout", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    p.add_argument("--smoothing", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    p.add_argument("--vocab-scale", type=float, nargs="+", default=[1.0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--set", action="append", default=[], help="extra override for every trial")
    a = p.parse_args()
    a.out = a.out.resolve()
    os.environ["OMP_NUM_THREADS"] = "1"  # the trainings (child processes) share the machine's cores
    a.updates = {int(k): int(v) for k, v in (x.split("=") for x in a.updates)}
    if missing := [d for d in a.models if d not in a.updates or d not in MODELS]:
        raise SystemExit(f"--updates has no count (or the script no shape) for d_model {missing}")
    a.out.mkdir(parents=True, exist_ok=True)
    results_path = a.out / "results.jsonl"
    done = {(r["corpus"], r["name"]) for r in map(json.loads, results_path.read_text().splitlines())} \
        if results_path.is_file() else set()
    lock = threading.Lock()
    work = []
    for direction in a.directions:
        src, tgt = direction.split("-")
        for size in a.sizes:
            key = f"{src}{tgt}_{size}"
            data = make_corpus(a.mirror.resolve(), a.out / "corpora" / key, src, tgt, size, a.seed)
            base = base_config(a, key, data, src, tgt)
            vocab = yaml.safe_load(base.read_text(encoding="utf-8"))["tokenizer"]["vocab_size"]
            work += [(key, base, data, t) for t in trials(a, vocab) if (key, t["name"]) not in done]
    work.sort(key=lambda w: a.vocab_scale.index(w[3]["vocab_scale"]))  # after a timeout: every corpus at 1x
    print(f"{len(work)} trials to run, {len(done)} done before", flush=True)

    def one(item: tuple) -> None:
        row = train_and_score(a, *item)
        if row is not None:
            with lock, open(results_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{row['corpus']} {row['name']}: test {row['test_bleu']:.2f}, valid {row['best_valid_bleu']}", flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, work))
    write_table(results_path, a.out / "results.md")


def write_table(results_path: Path, out: Path) -> None:
    rows = [json.loads(x) for x in results_path.read_text(encoding="utf-8").splitlines()]
    lines = []
    for corpus in sorted({r["corpus"] for r in rows}, key=lambda c: (c.split("_")[0], int(c.split("_")[1]))):
        part = sorted((r for r in rows if r["corpus"] == corpus), key=lambda r: -r["test_bleu"])
        lines += [f"\n### {corpus}\n", "| d_model | dropout | label smoothing | vocabulary | updates | test BLEU | best valid BLEU | checkpoint |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {r['d_model']} | {r['dropout']} | {r['smoothing']} | {r['vocab']} | {r['updates']} | "
                  f"{r['test_bleu']:.2f} | {r['best_valid_bleu']} | {r['checkpoint']} |" for r in part]
    out.write_text("\n".join(lines).lstrip("\n") + "\n", encoding="utf-8")
    print(out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
