"""The cleaning experiment of issue 37: how much of the BLEU that noise costs does cleaning recover?

Driven through the real CLI (`python -m mt ...`), end to end from the Multi30k mirror:

1. data: Multi30k en-de train, and a noisy copy (scripts/experiments/make_noise.py: 35% of the pairs copies,
   misaligned, French targets, duplicates, fragments, labelled); `mt data clean` by rules +
   language ID (precision and recall of each rule against the labels);
2. phase 1, in parallel (`--jobs`): en->de on clean, on noisy, on noisy cleaned by rules + LID, and
   de->en on noisy (the backward scoring model; the forward one is the noisy run itself: scoring
   models trained on the noisy data, the realistic case);
3. `mt data clean --forward --backward --keep K`: rules + LID + dual conditional cross-entropy;
4. phase 2: en->de on that;
5. `mt evaluate` of every en->de run on test_2016_flickr (beam from the config, or --eval-beam).

Every training has the same update budget (`--updates`; the demo recipe configs/multi30k_en_de.yaml
otherwise, its time budget off) and seed. Writes `results.json` and `results.md` (BLEU table, the
recovery = (cleaned - noisy) / (clean - noisy), per-rule precision/recall, timings) into --out.
py3langid must be importable by the child processes: `--pythonpath DIR` puts DIR (e.g. a copy of
the installed py3langid package's parent folder) in front of their PYTHONPATH.

    # here, a CPU proof on a subset (minutes):
    python scripts/experiments/exp_clean.py --mirror /work/shared/data/multi30k --out out/exp_clean_cpu \\
        --limit 3000 --updates 30 --jobs 2 --device cpu --eval-beam 1
    # the GPU run (py3langid copied into exp_deps/ where the machine lacks it):
    python scripts/experiments/exp_clean.py --mirror data/multi30k --out /tmp/exp_clean \\
        --updates 1200 --jobs 4 --device cuda --pythonpath exp_deps
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from exp_common import checkpoint, parallel, run
from exp_common import env as child_env
from make_noise import copy_splits, make, read_mirror, score

REPO = Path(__file__).resolve().parents[2]

TEST = "test_2016_flickr"


def build_data(a: argparse.Namespace, out: Path) -> dict[str, object]:
    """The noisy corpus with its labels, and the clean one (the same first pairs) beside it."""
    data = out / "data"
    noise = make(a.mirror, data / "noisy", a.seed, a.scale, a.limit)
    clean = data / "clean"
    clean.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        lines = read_mirror(a.mirror, f"train.{lang}")[:a.limit or None]
        (clean / f"train.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    copy_splits(a.mirror, clean)
    return noise


def train_args(a: argparse.Namespace, out: Path, name: str, data: Path, reverse: bool = False) -> list[str]:
    sets = [f"name={name}", f"run_root={out / 'runs'}", f"data.path={data}", f"train.max_updates={a.updates}",
            "train.time_budget=0", f"train.device={a.device}", f"train.seed={a.seed}"]
    sets.append(f"train.threads={max(1, (os.cpu_count() or 1) // max(1, a.jobs))}")  # no oversubscription
    if reverse:
        sets += ["data.src_lang=de", "data.tgt_lang=en"]
    sets += a.set
    return ["train", str(a.config), *[x for s in sets for x in ("--set", s)]]


def bleus(out: Path, names: list[str], a: argparse.Namespace) -> dict[str, float]:
    """`mt evaluate` of each run's checkpoint on TEST (in parallel, --jobs): BLEU by run."""
    jobs = [(f"eval_{name}", ["evaluate", "-c", str(checkpoint(out, name)), "--split", TEST, "--out-dir",
                              str(out / "eval" / name), "--device", a.device]
             + (["--beam", str(a.eval_beam)] if a.eval_beam else [])) for name in names]
    parallel(jobs, a.jobs, out, a.pythonpath)
    found = {}
    for name in names:
        report = next((out / "eval" / name).glob("*.json"))
        found[name] = float(json.loads(report.read_text(encoding="utf-8"))["bleu"])
    return found


def table(results: dict[str, object]) -> str:
    b = results["bleu"]
    lines = ["| data | training pairs | BLEU test_2016_flickr | recovered |", "|---|---:|---:|---:|"]
    cost = b["clean"] - b["noisy"]
    for name in ("clean", "noisy", "rules", "scored"):
        rec = "" if name in ("clean", "noisy") or cost <= 0 else f"{100 * (b[name] - b['noisy']) / cost:.0f}%"
        lines.append(f"| {name} | {results['pairs'][name]} | {b[name]:.2f} | {rec} |")
    lines += ["", "| cleaning | rule | dropped | precision |", "|---|---|---:|---:|"]
    for run_name in ("rules", "scored"):
        for rule, r in results["precision_recall"][run_name]["rules"].items():
            lines.append(f"| {run_name} | {rule} | {r['dropped']} | {r['precision']:.3f} |")
    lines += ["", "| cleaning | noise kind | pairs | recall |", "|---|---|---:|---:|"]
    for run_name in ("rules", "scored"):
        for kind, r in results["precision_recall"][run_name]["kinds"].items():
            lines.append(f"| {run_name} | {kind} | {r['pairs']} | {r['recall']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--updates", type=int, default=1200, help="update budget of every training")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--jobs", type=int, default=1, help="trainings run at once (phase 1 has 4)")
    p.add_argument("--config", type=Path, default=REPO / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--limit", type=int, default=0, help="use the first N training pairs (0 = all 29,000)")
    p.add_argument("--keep", type=float, default=0.85, help="share of the rule-kept pairs the model scores keep")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="noise shares multiplier (1 = 35%% noisy)")
    p.add_argument("--eval-beam", type=int, default=0, help="beam for the test BLEU (0 = the config's)")
    p.add_argument("--pythonpath", default="", help="put this folder in front of the children's PYTHONPATH")
    p.add_argument("--set", action="append", default=[], help="extra config override for every training")
    a = p.parse_args()
    out = a.out.resolve()
    a.mirror = a.mirror.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = child_env(a.pythonpath)
    if subprocess.run([sys.executable, "-c", "import py3langid"], env=env, capture_output=True).returncode != 0:
        sys.exit("exp_clean: py3langid is not importable: pip install py3langid==0.4.0, or copy the installed package "
                 "folder (site-packages/py3langid) into a folder DIR and pass --pythonpath DIR")
    workers = ["--workers", str(max(1, min(8, (os.cpu_count() or 1) // 2)))]
    t0 = time.perf_counter()
    noise = build_data(a, out)
    data = out / "data"
    seconds = {"rules_clean": run("clean_rules", ["data", "clean", str(data / "noisy"), "-o", str(data / "rules"),
                                                  "--dropped-file", *workers], out, a.pythonpath)}
    copy_splits(a.mirror, data / "rules")
    seconds.update(parallel([("clean", train_args(a, out, "clean", data / "clean")),
                             ("noisy", train_args(a, out, "noisy", data / "noisy")),
                             ("rules", train_args(a, out, "rules", data / "rules")),
                             ("noisy_bwd", train_args(a, out, "noisy_bwd", data / "noisy", reverse=True))],
                            a.jobs, out, a.pythonpath))
    seconds["score_clean"] = run("clean_scored", [
        "data", "clean", str(data / "noisy"), "-o", str(data / "scored"), "--dropped-file", "--device", a.device,
        "--forward", str(checkpoint(out, "noisy")), "--backward", str(checkpoint(out, "noisy_bwd")),
        "--keep", str(a.keep), *workers], out, a.pythonpath)
    copy_splits(a.mirror, data / "scored")
    seconds["scored"] = run("scored", train_args(a, out, "scored", data / "scored"), out, a.pythonpath)
    results: dict[str, object] = {
        "updates": a.updates, "device": a.device, "config": str(a.config), "limit": a.limit, "keep": a.keep,
        "noise": noise, "seconds": seconds,
        "pairs": {name: sum(1 for _ in (data / name / "train.en").open(encoding="utf-8"))
                  for name in ("clean", "noisy", "rules", "scored")},
        "precision_recall": {name: score(data / "noisy" / "train.labels", data / name / "clean_dropped.jsonl")
                             for name in ("rules", "scored")},
        "bleu": bleus(out, ["clean", "noisy", "rules", "scored"], a),
    }
    b = results["bleu"]
    cost = b["clean"] - b["noisy"]
    results["recovered"] = {name: (b[name] - b["noisy"]) / cost if cost > 0 else None for name in ("rules", "scored")}
    results["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(table(results), encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
