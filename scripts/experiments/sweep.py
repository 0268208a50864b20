"""Hyper-parameter sweep under a short proxy budget: run `mt train` once per trial, tabulate val BLEU.

A trials file (YAML) names a base config, the overrides every trial shares (`common`, e.g. the
proxy's own warmup and checkpoint spacing), and the trials, each a name plus its `--set`
overrides on top of `common`:

    config: configs/multi30k_en_de.yaml
    budget: 5m
    common: {train.warmup: 100, train.save_every: 25}
    trials:
      - name: base
      - name: lr2.5e-3
        set: {train.lr: 2.5e-3}

Each trial is a real `mt prepare` + `mt train` in its own run folder (`<run_root>/<prefix>_<name>`),
trained for `budget` of wall clock, one after another: the trials compete for the same cores, so
they never run side by side. Trials that share the data-shaping keys (`data.*`, `tokenizer.*`,
`model.max_positions`, `train.seed`) share one prepared corpus (copied, then `mt prepare` checks
its fingerprint). The score of a trial is what `make demo` would pick: the best of its
validations and of the averaged checkpoint (validation set only; test sets are never read).
Results are appended to `<out>.jsonl` as each trial ends, so a killed sweep continues where it
stopped, and `<out>.md` is rewritten after every trial: one row per trial, best first.

    .venv/bin/python scripts/experiments/sweep.py configs/sweep_multi30k_en_de.yaml --out docs/data/sweep_multi30k_en_de
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from mt.config_checks import NAME

REPO = Path(__file__).resolve().parents[2]
DATA_KEYS = ("data.", "tokenizer.", "model.max_positions", "train.seed")


def load_trials(path: Path) -> dict[str, Any]:
    """The trials file, checked: unique names, `set` mappings of section.key to scalars."""
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        sys.exit(f"sweep: cannot read trials file '{path}': {e}")
    if not isinstance(spec, dict) or not isinstance(spec.get("trials"), list) or not spec["trials"]:
        sys.exit(f"sweep: '{path}' needs a non-empty `trials:` list")
    names = [t.get("name") if isinstance(t, dict) else None for t in spec["trials"]]
    if any(not isinstance(n, str) or not NAME.fullmatch(n) for n in names) or len(set(names)) != len(names):
        sys.exit(f"sweep: '{path}': every trial needs a unique `name` of letters, digits, '.', '_' and '-'")
    for block in [spec.get("common") or {}] + [t.get("set") or {} for t in spec["trials"]]:
        if not isinstance(block, dict) or any(isinstance(v, (dict, list)) for v in block.values()):
            sys.exit(f"sweep: '{path}': `common` and `set` map section.key to a scalar value")
    return spec


def overrides_of(spec: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    """`common` then the trial's own `set` (the trial wins)."""
    return {**(spec.get("common") or {}), **(trial.get("set") or {})}


def as_set_args(overrides: dict[str, Any]) -> list[str]:
    """`--set key=value` pairs; values go back as YAML scalars (`mt` parses them as YAML)."""
    args: list[str] = []
    for key, value in overrides.items():
        args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return args


def data_key(overrides: dict[str, Any]) -> str:
    """Trials with equal data-shaping overrides can share one prepared corpus."""
    return json.dumps({k: v for k, v in overrides.items() if k.startswith(DATA_KEYS)}, sort_keys=True)


def summarize(run_dir: Path) -> dict[str, Any]:
    """Val BLEU (best validation, averaged checkpoint, the better of the two), updates, epochs, speed."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = [r for r in records if r.get("kind") == "valid" and "bleu" in r]
    averaged = [r for r in records if r.get("kind") == "averaged" and "bleu" in r]
    train = [r for r in records if r.get("kind") == "train"]
    if not valid:
        raise RuntimeError(f"{run_dir}: no validation with BLEU in metrics.jsonl")
    best = max(valid, key=lambda r: r["bleu"])
    avg_bleu = averaged[-1]["bleu"] if averaged else None
    last = max(valid + train, key=lambda r: r["update"])
    return {"best_bleu": round(best["bleu"], 2), "best_update": best["update"],
            "averaged_bleu": None if avg_bleu is None else round(avg_bleu, 2),
            "selected_bleu": round(max(best["bleu"], avg_bleu if avg_bleu is not None else -1.0), 2),
            "val_nll": round(min(r["nll"] for r in valid), 3), "updates": last["update"],
            "epochs": last.get("epoch"),
            "tok_s": round(sum(r["tok_s"] for r in train) / len(train)) if train else None}


def run_trial(spec: dict[str, Any], trial: dict[str, Any], *, prefix: str, prepared: dict[str, Path],
              mt: list[str]) -> dict[str, Any]:
    overrides = overrides_of(spec, trial)
    name = f"{prefix}_{trial['name']}"
    run_dir = REPO / str(overrides.get("run_root", "runs")) / name
    config = str(spec["config"])
    args = ["--set", f"name={name}", *as_set_args(overrides)]
    if run_dir.exists():  # a trial cut short by a killed sweep starts over
        shutil.rmtree(run_dir)
    source = prepared.get(data_key(overrides))
    if source is not None:
        run_dir.mkdir(parents=True)
        for model in source.glob("spm*.model"):
            shutil.copy2(model, run_dir / model.name)
        shutil.copytree(source / "data", run_dir / "data")
    subprocess.run([*mt, "prepare", config, *args], cwd=REPO, check=True)
    prepared[data_key(overrides)] = run_dir
    start = time.time()
    subprocess.run([*mt, "train", config, *args, "--set", f"train.time_budget={spec['budget']}"],
                   cwd=REPO, check=True)
    return {"name": trial["name"], "set": trial.get("set") or {}, "wall_s": round(time.time() - start),
            **summarize(run_dir)}


def write_table(spec: dict[str, Any], results: list[dict[str, Any]], path: Path) -> None:
    rows = sorted(results, key=lambda r: -r["selected_bleu"])
    common = ", ".join(f"`{k}={v}`" for k, v in (spec.get("common") or {}).items()) or "none"
    lines = [f"Sweep of `{spec['config']}`, {spec['budget']} of training per trial (`scripts/experiments/sweep.py`); "
             f"shared overrides: {common}. Val BLEU is greedy on the validation split; *selected* is "
             f"what `make demo` keeps (the better of best.pt and averaged.pt).", "",
             "| trial | overrides | selected val BLEU | best val BLEU (update) | averaged | val NLL | updates "
             "| epochs | train tgt tok/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        sets = ", ".join(f"`{k}={v}`" for k, v in r["set"].items()) or "(config as is)"
        avg = "" if r["averaged_bleu"] is None else f"{r['averaged_bleu']:.2f}"
        lines.append(f"| {r['name']} | {sets} | {r['selected_bleu']:.2f} | {r['best_bleu']:.2f} ({r['best_update']}) "
                     f"| {avg} | {r['val_nll']:.3f} | {r['updates']} | {r['epochs']} | {r['tok_s']} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trials", type=Path, help="YAML file: config, budget, common overrides, trials")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.jsonl (results) and OUT.md (table)")
    parser.add_argument("--prefix", default="sweep", help="run folders are <run_root>/PREFIX_<trial name>")
    parser.add_argument("--only", action="append", default=[], help="run only these trials (repeatable)")
    opts = parser.parse_args()
    spec = load_trials(opts.trials)
    spec.setdefault("budget", "5m")
    if not Path(REPO / str(spec.get("config", ""))).is_file():
        sys.exit(f"sweep: config '{spec.get('config')}' (relative to the repository) does not exist")
    jsonl, table = opts.out.with_suffix(".jsonl"), opts.out.with_suffix(".md")
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    results = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()] if jsonl.is_file() else []
    done = {r["name"] for r in results}
    mt = [sys.executable, "-m", "mt"]
    prepared: dict[str, Path] = {}  # data key -> a run folder holding that prepared corpus
    for trial in spec["trials"]:
        folder = REPO / str(overrides_of(spec, trial).get("run_root", "runs")) / f"{opts.prefix}_{trial['name']}"
        if trial["name"] in done and (folder / "data" / "manifest.json").is_file():
            prepared[data_key(overrides_of(spec, trial))] = folder
    for trial in spec["trials"]:
        if trial["name"] in done or (opts.only and trial["name"] not in opts.only):
            continue
        print(f"sweep: trial {trial['name']}: {overrides_of(spec, trial)}", flush=True)
        try:
            result = run_trial(spec, trial, prefix=opts.prefix, prepared=prepared, mt=mt)
        except subprocess.CalledProcessError as e:
            sys.exit(f"sweep: trial '{trial['name']}' failed (exit {e.returncode}); fix it and run again to continue")
        with jsonl.open("a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
        results.append(result)
        write_table(spec, results, table)
        print(f"sweep: {trial['name']}: selected val BLEU {result['selected_bleu']} after {result['updates']} updates",
              flush=True)
    if results:
        write_table(spec, results, table)
        print(f"sweep: table in {table}")


if __name__ == "__main__":
    main()
