"""The distillation experiment of issue 38: a small, fast student trained on the teacher's beam
output against the same student trained on the references, in the same update budget.

Driven through the real CLI (`python -m mt ...`), end to end from the Multi30k mirror:

1. phase 1, in parallel (`--jobs`): the teacher (the demo recipe configs/multi30k_en_de.yaml, or
   `--teacher-config`) and the student config (configs/multi30k_en_de_student.yaml) on the
   references ("student_ref"); `--teacher CKPT` skips training a teacher;
2. `mt distill --teacher ... STUDENT.yaml`: the teacher translates every training source (beam
   `--beam`, 5; `--select-bleu N`: the closest to the reference of its N best), and the student
   trains on that ("student_distilled"), with the teacher's tokenizer;
3. `mt evaluate` of the three on test_2016_flickr (the config's beam, or --eval-beam).

Every training has the same update budget (`--updates`) and seed (time budgets off). Writes
`results.json` (the markdown table in it too, `table_md`) and `results.md` into --out, and into
`--bring` (default OUT/bring) results.json with compact copies of the three final checkpoints
(fp32 weights-only inference checkpoints, cut into parts under 16 MiB: `cat NAME.pt.part* >
NAME.pt`; their sha256s are in results.json; 5 files with the shipped configs) for speed
measurements elsewhere (scripts/experiments/exp_distill_speed.py).

    # here, a CPU proof on a subset (minutes):
    python scripts/experiments/exp_distill.py --mirror /work/shared/data/multi30k --out out/exp_distill_cpu \\
        --limit 1000 --updates 30 --jobs 2 --device cpu --eval-beam 1 --set tokenizer.vocab_size=1000
    # the GPU run:
    python scripts/experiments/exp_distill.py --mirror /work/shared/data/multi30k --out out/exp_distill \\
        --updates 3000 --jobs 2 --device cuda --bring $OUT/distill
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
    compact_copy,
    corpus,
    parallel,
    run,
    train_job,
    train_pairs,
    train_sets,
)

NAMES = ("teacher", "student_ref", "student_distilled")


def table(r: dict) -> str:
    b = r["bleu"]
    lines = [f"| model | config | parameters | trained on | BLEU {TEST} |", "|---|---|---:|---|---:|"]
    for name in NAMES:
        lines.append(f"| {name} | {r['configs'][name]} | {r['params'].get(name, '?')} | {r['data'][name]} | {b[name]:.2f} |")
    lines.append(f"\ndistilled - reference-trained student: {b['student_distilled'] - b['student_ref']:+.2f} BLEU "
                 f"(goal >= +1); teacher - distilled student: {b['teacher'] - b['student_distilled']:+.2f} (goal <= 1).")
    return "\n".join(lines) + "\n"


def _params(path: Path) -> str:
    from mt.model.checkpoint import read_checkpoint

    ckpt = read_checkpoint(path)
    return f"{sum(t.numel() for t in ckpt.weights.values()) / 1e6:.2f}M"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, ("--mirror", "--out", "--updates", "--device", "--jobs", "--seed", "--eval-beam", "--set"))
    p.add_argument("--teacher-config", type=Path, default=REPO / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--student-config", type=Path, default=REPO / "configs" / "multi30k_en_de_student.yaml")
    p.add_argument("--teacher", type=Path, help="a trained teacher checkpoint (skips training one)")
    p.add_argument("--limit", type=int, default=0, help="use the first N training pairs (0 = all 29,000)")
    p.add_argument("--beam", type=int, default=5, help="the teacher's beam when it translates the training sources")
    p.add_argument("--select-bleu", type=int, default=0, help="N >= 2: keep the closest to the reference of N best")
    p.add_argument("--bring", type=Path, help="results + compact checkpoints (default OUT/bring)")
    a = p.parse_args()
    out, a.mirror = a.out.resolve(), a.mirror.resolve()
    bring = (a.bring or out / "bring").resolve()
    out.mkdir(parents=True, exist_ok=True)
    bring.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    en, de = train_pairs(a.mirror, a.limit)
    data = corpus(a.mirror, out / "data" / "all", en, de)
    jobs = [train_job(a, out, "student_ref", a.student_config, data)]
    if a.teacher is None:
        jobs.insert(0, train_job(a, out, "teacher", a.teacher_config, data))
    seconds = parallel(jobs, a.jobs, out)
    teacher = a.teacher.resolve() if a.teacher is not None else checkpoint(out, "teacher")
    select = ["--n-best", str(a.select_bleu), "--select-bleu"] if a.select_bleu >= 2 else []
    seconds["student_distilled"] = run("student_distilled", [
        "distill", str(a.student_config), "--teacher", str(teacher), "--beam", str(a.beam), "--device", a.device,
        *select, *train_sets(a, out, "student_distilled", data)], out)
    ckpts = {"teacher": teacher, "student_ref": checkpoint(out, "student_ref"),
             "student_distilled": checkpoint(out, "student_distilled")}
    results: dict = {"updates": a.updates, "device": a.device, "seed": a.seed, "pairs": len(en), "beam": a.beam,
                     "select_bleu": a.select_bleu, "seconds": seconds,
                     "configs": {"teacher": a.teacher_config.name if a.teacher is None else str(a.teacher),
                                 "student_ref": a.student_config.name, "student_distilled": a.student_config.name},
                     "data": {"teacher": "references", "student_ref": "references",
                              "student_distilled": f"teacher beam {a.beam}" + (f", best of {a.select_bleu} by sentence BLEU"
                                                                               if select else "")},
                     "params": {n: _params(c) for n, c in ckpts.items()},
                     "bleu": {}}
    if a.teacher is not None:
        run("eval_teacher", ["evaluate", "-c", str(teacher), "--src", str(data / f"{TEST}.en"), "--ref",
                             str(data / f"{TEST}.de"), "--out-dir", str(out / "eval" / "teacher"), "--device", a.device]
            + (["--beam", str(a.eval_beam)] if a.eval_beam else []), out)
        results["bleu"]["teacher"] = float(json.loads(next((out / "eval" / "teacher").glob("*.json")).read_text())["bleu"])
    results["bleu"].update(bleus(a, out, ["student_ref", "student_distilled"] + (["teacher"] if a.teacher is None else [])))
    b = results["bleu"]
    results["goals"] = {"distilled_minus_ref": round(b["student_distilled"] - b["student_ref"], 2),
                        "teacher_minus_distilled": round(b["teacher"] - b["student_distilled"], 2)}
    results["manifest"] = json.loads((out / "runs" / "student_distilled" / "distill" / "manifest.json").read_text())
    results["checkpoints"] = {n: compact_copy(c, bring, n) for n, c in ckpts.items()}
    (out / "checkpoints.sha256").write_text("".join(f"{r['sha256']}  {n}.pt\n" for n, r in results["checkpoints"].items()))
    results["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    results["table_md"] = table(results)
    (out / "results.md").write_text(table(results), encoding="utf-8")
    for folder in {out, bring}:  # --bring: results.json and the parts only (few files to carry)
        (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
