"""The back-translation experiment of issue 38: how much of the BLEU lost by having 10k instead of
29k parallel pairs does back-translated monolingual German recover?

Driven through the real CLI (`python -m mt ...`), end to end from the Multi30k mirror:

1. data: the first `--parallel` (10,000) training pairs are the parallel corpus; the German side of
   the rest (~19,000) is the monolingual text; all the pairs are the upper bound's corpus;
2. phase 1, in parallel (`--jobs`): en->de on 10k ("real10k"), de->en on 10k ("rev10k", the
   reverse model), en->de on all ("real29k");
3. `mt backtranslate` of the monolingual German with rev10k, sampled (unrestricted, seed 1) and
   beam (`--bt-beam`, 5);
4. phase 2, in parallel: en->de on 10k real + each synthetic corpus (`data.synthetic`), tagged
   (`<BT>`) and untagged, with `data.synthetic_ratio` `--ratio` (1: the real pairs upsampled to as
   many as the synthetic ones per epoch);
5. `mt evaluate` of every en->de model on test_2016_flickr (the config's beam, or --eval-beam).

Every training has the same update budget (`--updates`) and seed, with the demo recipe
configs/multi30k_en_de.yaml otherwise (its time budget off). Writes `results.json` and
`results.md` (BLEU per run and the share of the 10k->29k gap each recovers; also `table_md` in
the JSON) into --out, results.json into --bring too.

    # here, a CPU proof on a subset (minutes):
    python scripts/experiments/exp_backtranslate.py --mirror /work/shared/data/multi30k --out out/exp_bt_cpu \\
        --limit 1500 --parallel 500 --updates 30 --jobs 2 --device cpu --eval-beam 1 --set tokenizer.vocab_size=1000
    # the GPU run:
    python scripts/experiments/exp_backtranslate.py --mirror /work/shared/data/multi30k --out out/exp_bt \\
        --updates 3000 --jobs 7 --device cuda
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from exp_common import (
    REPO,
    TEST,
    add_common_args,
    bleus,
    checkpoint,
    corpus,
    parallel,
    train_job,
    train_pairs,
    write_lines,
)

SYNTHETIC = ("bt_beam", "bt_beam_untagged", "bt_sampled", "bt_sampled_untagged")


def table(r: dict) -> str:
    b, gap = r["bleu"], r["bleu"]["real29k"] - r["bleu"]["real10k"]
    lines = [f"| en->de training data | pairs per epoch | BLEU {TEST} | share of the 10k->29k gap |",
             "|---|---|---:|---:|"]
    for name in ("real10k", *SYNTHETIC, "real29k"):
        share = "" if name in ("real10k", "real29k") or gap <= 0 else f"{100 * (b[name] - b['real10k']) / gap:.0f}%"
        lines.append(f"| {r['labels'][name]} | {r['epoch'][name]} | {b[name]:.2f} | {share} |")
    lines.append(f"\nde->en reverse model (10k): BLEU {r['bleu_reverse']:.2f} on {TEST} (en references)." if
                 "bleu_reverse" in r else "")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, ("--mirror", "--out", "--updates", "--device", "--jobs", "--seed", "--eval-beam", "--set"))
    p.add_argument("--config", type=Path, default=REPO / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--limit", type=int, default=0, help="use the first N training pairs in all (0 = all 29,000)")
    p.add_argument("--parallel", type=int, default=10000, help="training pairs kept as parallel data")
    p.add_argument("--ratio", type=float, default=1.0, help="data.synthetic_ratio of the BT runs")
    p.add_argument("--bt-beam", type=int, default=5, help="beam of the beam back-translation")
    p.add_argument("--bring", type=Path, help="also write results.json here (e.g. $OUT/bt)")
    a = p.parse_args()
    out, a.mirror = a.out.resolve(), a.mirror.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    en, de = train_pairs(a.mirror, a.limit)
    data = out / "data"
    corpus(a.mirror, data / "par", en[:a.parallel], de[:a.parallel])
    corpus(a.mirror, data / "all", en, de)
    write_lines(data / "mono.de", de[a.parallel:])
    cfg = str(a.config)
    seconds = parallel([train_job(a, out, "real10k", a.config, data / "par"),
                        train_job(a, out, "rev10k", a.config, data / "par", ("data.src_lang=de", "data.tgt_lang=en")),
                        train_job(a, out, "real29k", a.config, data / "all")], a.jobs, out)
    rev = str(checkpoint(out, "rev10k"))
    bt = {"bt_sampled": ["--seed", "1"], "bt_beam": ["--beam", str(a.bt_beam)]}
    seconds.update(parallel([(f"backtranslate_{k}", ["backtranslate", "-c", rev, "--mono", str(data / "mono.de"),
                                                     "-o", str(data / k), "--device", a.device, *v])
                             for k, v in bt.items()], 2, out))
    runs = []
    for name in SYNTHETIC:
        source = data / name.replace("_untagged", "")
        extra = (f"data.synthetic=[{source}]", f"data.synthetic_ratio={a.ratio}",
                 f"data.synthetic_tag={'false' if name.endswith('untagged') else 'true'}")
        runs.append(train_job(a, out, name, a.config, data / "par", extra))
    seconds.update(parallel(runs, a.jobs, out))
    names = ("real10k", *SYNTHETIC, "real29k", "rev10k")
    results: dict = {"updates": a.updates, "device": a.device, "config": cfg, "seed": a.seed, "ratio": a.ratio,
                     "pairs": {"parallel": min(a.parallel, len(en)), "mono": max(0, len(en) - a.parallel), "all": len(en)},
                     "bt_beam": a.bt_beam, "seconds": seconds,
                     "bleu": bleus(a, out, list(names))}
    results["bleu_reverse"] = results["bleu"].pop("rev10k")
    n_par, n_mono = results["pairs"]["parallel"], results["pairs"]["mono"]
    real_epoch = round(n_mono / a.ratio) if a.ratio > 0 and n_mono >= a.ratio * n_par else n_par
    syn_epoch = n_mono if a.ratio <= 0 or n_mono >= a.ratio * n_par else round(a.ratio * n_par)
    results["epoch"] = {"real10k": f"{n_par} real", "real29k": f"{len(en)} real",
                        **{n: f"{real_epoch} real + {syn_epoch} synthetic" for n in SYNTHETIC}}
    results["labels"] = {"real10k": "10k real", "real29k": "all real (upper bound)",
                         "bt_beam": f"10k real + BT beam {a.bt_beam}, tagged", "bt_beam_untagged": f"10k real + BT beam {a.bt_beam}",
                         "bt_sampled": "10k real + BT sampled, tagged", "bt_sampled_untagged": "10k real + BT sampled"}
    b = results["bleu"]
    gap = b["real29k"] - b["real10k"]
    results["recovered"] = {n: round((b[n] - b["real10k"]) / gap, 3) if gap > 0 else None for n in SYNTHETIC}
    results["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    for k in bt:
        results[f"manifest_{k}"] = json.loads((data / k / "manifest.json").read_text(encoding="utf-8"))
    results["table_md"] = table(results)
    (out / "results.md").write_text(table(results), encoding="utf-8")
    for folder in {out, (a.bring or out).resolve()}:  # --bring: results.json only (the table is in it)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
