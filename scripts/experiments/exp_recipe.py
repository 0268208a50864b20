"""The recipe (`mt train --data`, mt/train/recipe.py) against the demo config with its data
swapped (`configs/multi30k_en_de.yaml`), at several corpus sizes, same time budget each, scored
on test_2016_flickr and compared with sacreBLEU's paired bootstrap (`mt evaluate --hyp A --hyp B`).

    python scripts/experiments/exp_recipe.py --mirror ../shared/data/multi30k --out exp/recipe \\
        --sizes 1000 3000 10000 --directions en-de --budget 4m --jobs 2 --set train.threads=1

Corpora: `sizes` pairs sampled (seeded) from Multi30k's train split, with its val and
test_2016_flickr splits, as text folders; or, with `--corpus FOLDER`, a folder of splits as a user
has it (any format `mt train --data` reads; `--test-split` names its test split), whole:

    python scripts/experiments/exp_recipe.py --corpus ../shared/data/tatoeba_en_ja --test-split test \
        --out exp/recipe_ja --directions en-ja ja-en --budget 6m --jobs 2 --set train.threads=1 \
        --demo-set data.format=tsv

(for ja-en on that en<TAB>ja folder add `--demo-set data.columns=tgt-src`; the recipe finds it
itself). Each (direction, size) trains `demo` (the demo config,
data swapped; a vocabulary sentencepiece says is too large for the corpus is cut to the largest
it accepts, as its error message tells a user to) and `recipe` (`mt train --data FOLDER`). Every
step is skipped when its output exists (a finished training, an evaluation's JSON report), so
after a timeout the same command continues. results.json / results.md in --out.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mt.textio import read_lines

REPO = Path(__file__).resolve().parents[2]
TEST = "test_2016_flickr"


def make_corpus(mirror: Path, dest: Path, src: str, tgt: str, size: int, seed: int) -> Path:
    """`size` seeded training pairs plus val and the test set, as a text folder."""
    if (dest / "done").is_file():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    train = list(zip(read_lines(mirror / f"train.{src}.gz"), read_lines(mirror / f"train.{tgt}.gz")))
    picked = sorted(random.Random(seed).sample(range(len(train)), min(size, len(train))))
    for lang, i in ((src, 0), (tgt, 1)):
        (dest / f"train.{lang}").write_text("".join(train[j][i] + "\n" for j in picked), encoding="utf-8")
        for split in ("val", TEST):
            (dest / f"{split}.{lang}").write_text("\n".join(read_lines(mirror / f"{split}.{lang}.gz")) + "\n", encoding="utf-8")
    (dest / "done").write_text("")
    return dest


def mt(args: list[str], log: Path) -> subprocess.CompletedProcess:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ python -m mt {' '.join(args)}\n")
        f.flush()
        return subprocess.run([sys.executable, "-m", "mt", *args], stdout=f, stderr=subprocess.STDOUT, cwd=REPO)


def best_checkpoint(run: Path) -> Path:
    averaged = run / "checkpoints" / "averaged.pt"
    return averaged if averaged.is_file() else run / "checkpoints" / "best.pt"


def train_demo(a: argparse.Namespace, name: str, data: Path, src: str, tgt: str) -> None:
    run = a.out / "runs" / name
    if (run / "done").is_file():
        return
    sets = ["--set", f"name={name}", "--set", f"run_root={a.out / 'runs'}", "--set", f"data.path={data}",
            "--set", f"data.src_lang={src}", "--set", f"data.tgt_lang={tgt}", "--set", f"data.test_splits=[{a.test}]",
            "--set", f"train.time_budget={a.budget}"] + [x for s in a.set + a.demo_set for x in ("--set", s)]
    log = a.out / "logs" / f"{name}.log"
    result = mt(["train", "configs/multi30k_en_de.yaml", *sets], log)
    if result.returncode != 0:
        m = re.search(r"use at most (\d+)", log.read_text(encoding="utf-8"))
        if m is None:
            raise SystemExit(f"{name}: training failed; see {log}")
        if mt(["train", "configs/multi30k_en_de.yaml", *sets, "--set", f"tokenizer.vocab_size={m.group(1)}"],
              log).returncode != 0:
            raise SystemExit(f"{name}: training failed; see {log}")
    (run / "done").write_text("")


def train_recipe(a: argparse.Namespace, name: str, data: Path, src: str, tgt: str) -> None:
    run = a.out / "runs" / name
    if (run / "done").is_file():
        return
    sets = ["--set", f"name={name}", "--set", f"run_root={a.out / 'runs'}"] + [x for s in a.set for x in ("--set", s)]
    log = a.out / "logs" / f"{name}.log"
    if mt(["train", "--data", str(data), "--src-lang", src, "--tgt-lang", tgt, "--budget", a.budget, *sets],
          log).returncode != 0:
        raise SystemExit(f"{name}: training failed; see {log}")
    (run / "done").write_text("")


def evaluate(a: argparse.Namespace, name: str) -> dict:
    run = a.out / "runs" / name
    ckpt = best_checkpoint(run)
    reports = sorted((run / "eval").glob(f"{a.test}.{ckpt.stem}.beam5.json")) if (run / "eval").is_dir() else []
    if not reports:
        if mt(["evaluate", "-c", str(ckpt), "--split", a.test, "--beam", "5"], a.out / "logs" / f"{name}.eval.log").returncode:
            raise SystemExit(f"{name}: evaluation failed")
        reports = sorted((run / "eval").glob(f"{a.test}.{ckpt.stem}.beam5.json"))
    report = json.loads(reports[0].read_text(encoding="utf-8"))
    updates = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"valid"' in x]
    return {"bleu": report["scores"]["bleu"] if "scores" in report else report["bleu"], "checkpoint": ckpt.name,
            "chrf": report["scores"]["chrf"] if "scores" in report else report.get("chrf"),
            "bleu_signature": report.get("bleu_signature", ""),
            "hyp": str(reports[0].with_suffix(".hyp")), "updates": updates[-1]["update"] if updates else None}


def chose(a: argparse.Namespace, name: str) -> str:
    """What the recipe chose for this corpus, in short: vocabulary, model, regularisation, batch."""
    import yaml

    c = yaml.safe_load((a.out / "runs" / name / "recipe.yaml").read_text(encoding="utf-8"))
    m, t = c["model"], c["train"]
    return (f"{c['tokenizer']['vocab_size']} pieces, d{m['d_model']} {m['encoder_layers']}+{m['decoder_layers']} "
            f"ff{m['d_ff']}, dropout {m['dropout']}, ls {t['label_smoothing']}, {t['max_tokens']} tok")


def reference_file(a: argparse.Namespace, data: Path, src: str, tgt: str, key: str) -> Path:
    """The test split's target side of a --corpus folder as a text file named for its language
    (the recipe's reading of it: format, and columns when a TSV holds the other direction)."""
    import yaml

    from mt.config import PairConfig
    from mt.data import corpus

    chosen = yaml.safe_load((a.out / "runs" / f"recipe_{key}" / "recipe.yaml").read_text(encoding="utf-8"))["data"]
    pair = PairConfig(path=str(data), src_lang=src, tgt_lang=tgt, format=chosen["format"],
                      columns=chosen.get("columns", "src-tgt"))
    out = a.out / "corpora" / key / f"{a.test}.{tgt}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(t + "\n" for t in corpus.read_split(pair, a.test)[1]), encoding="utf-8")
    return out


def compare(a: argparse.Namespace, data: Path, src: str, tgt: str, demo: dict, recipe: dict, key: str) -> dict:
    out = a.out / "compare" / key / "comparison.json"
    if not out.is_file():
        ref = data / f"{a.test}.{tgt}" if a.corpus is None else reference_file(a, data, src, tgt, key)
        if mt(["evaluate", "--hyp", demo["hyp"], "--hyp", recipe["hyp"], "--ref", str(ref), "--tokenize",
               recipe["bleu_signature"].split("|tok:")[1].split("|")[0].split("-0.")[0] if recipe["bleu_signature"] else "",
               "--out-dir", str(out.parent)], a.out / "logs" / f"{key}.compare.log").returncode:
            raise SystemExit(f"{key}: comparison failed")
    return json.loads(out.read_text(encoding="utf-8"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, help="Multi30k's mirror (without --corpus)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="*", default=[1000, 3000, 10000],
                   help="corpus sizes to train (none, with --merge: only the table and plot of earlier runs)")
    p.add_argument("--directions", nargs="+", default=["en-de"])
    p.add_argument("--budget", default="4m")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--demo-set", action="append", default=[], help="--set for the demo config's runs only")
    p.add_argument("--corpus", type=Path, help="a folder of splits to train on whole (instead of Multi30k samples)")
    p.add_argument("--test-split", dest="test", default=TEST)
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="results.json of earlier runs of this script to put in the same table and plot")
    a = p.parse_args()
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    merged = [r for m in a.merge for r in json.loads(m.read_text(encoding="utf-8"))]
    rows = list(merged)
    for direction in a.directions:
        src, tgt = direction.split("-")
        for size in a.sizes if a.corpus is None else [0]:
            key = f"{src}{tgt}_{size or 'all'}"
            data = (a.corpus.resolve() if a.corpus is not None else
                    make_corpus(a.mirror.resolve(), a.out / "corpora" / key, src, tgt, size, a.seed))
            t0 = time.time()
            with ThreadPoolExecutor(a.jobs) as pool:
                jobs = [pool.submit(train_demo, a, f"demo_{key}", data, src, tgt),
                        pool.submit(train_recipe, a, f"recipe_{key}", data, src, tgt)]
                for j in jobs:
                    j.result()
            demo, recipe = evaluate(a, f"demo_{key}"), evaluate(a, f"recipe_{key}")
            cmp = compare(a, data, src, tgt, demo, recipe, key)
            recipe["chose"] = chose(a, f"recipe_{key}")
            rows.append({"direction": direction, "pairs": size, "budget": a.budget, "demo": demo, "recipe": recipe,
                         "comparison": cmp, "wall_s": round(time.time() - t0)})
            (a.out / "results.json").write_text(json.dumps(rows[len(merged):], indent=2) + "\n")
    lines = ["| direction | pairs | budget | demo BLEU ± 95% CI (updates) | recipe BLEU ± 95% CI (updates) | Δ | p (paired bootstrap) | chrF demo / recipe | the recipe chose |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        sysa, sysb = r["comparison"]["systems"][:2]
        pairs = f"{r['pairs']:,}" if r["pairs"] else "the whole corpus"  # --corpus: trained on all of it
        lines.append(f"| {r['direction']} | {pairs} | {r['budget']} | {r['demo']['bleu']:.2f} ± {sysa['ci']:.2f} ({r['demo']['updates']}) | "
                     f"{r['recipe']['bleu']:.2f} ± {sysb['ci']:.2f} ({r['recipe']['updates']}) | {r['recipe']['bleu'] - r['demo']['bleu']:+.2f} | "
                     f"{sysb['p_value']:.4f} | {r['demo'].get('chrf') or 0:.2f} / {r['recipe'].get('chrf') or 0:.2f} | "
                     f"{r['recipe'].get('chose', '')} |")
    (a.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, a.out / "recipe_vs_demo.png")


def plot(rows: list[dict], path: Path) -> None:
    """test BLEU against corpus size, recipe and demo config, one line each per direction and budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, key in enumerate(sorted({(r["direction"], r["budget"]) for r in rows})):
        part = sorted((r for r in rows if (r["direction"], r["budget"]) == key), key=lambda r: r["pairs"])
        for system, style in (("recipe", "o-"), ("demo", "s--")):  # one colour per direction and budget
            ax.errorbar([r["pairs"] for r in part], [r[system]["bleu"] for r in part],
                        yerr=[r["comparison"]["systems"][system == "recipe"]["ci"] for r in part], fmt=style,
                        color=f"C{i}", capsize=3, label=f"{system} {key[0]} {key[1]}")
    ax.set_xscale("log")
    ax.set_xlabel("training pairs (Multi30k sample)")
    ax.set_ylabel("test_2016_flickr BLEU (beam 5)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
