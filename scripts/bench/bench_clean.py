"""Benchmark the cleaning stage (`mt data clean`) on the scale test's corpus size (issue 37).

The corpus is Multi30k train replicated to --pairs (default 4.5M, the size of WMT14 en-de and of
scripts/bench/bench_prepare.py's corpus), each replica k > 0 with " k" appended to both sides, so that
every pair is distinct: the duplicate tables grow to their full size and every pair reaches
language identification (plain replicas would be dropped as duplicates before it). Each setting
runs `python -m mt data clean` in a fresh process; reported: wall seconds, pairs/s, CPU seconds
and the peak RSS of that process (os.wait4). With --forward/--backward (any en->de and de->en
checkpoints: speed does not depend on the weights) the dual cross-entropy pass is timed
separately on the first --score-pairs pairs of Multi30k.

    python scripts/bench/bench_clean.py --mirror /work/shared/data/multi30k --pairs 300000   # quick
    python scripts/bench/bench_clean.py --mirror /work/shared/data/multi30k                  # 4.5M
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mt.device import cpu_name
from mt.textio import read_lines

REPO = Path(__file__).resolve().parents[2]

SETTINGS = {
    "rules": ["--set", "clean.rules=[no_text,length,copy,script,numbers,duplicate,near_duplicate]"],
    "rules+langid": [],
}


def build(mirror: Path, out: Path, pairs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    en, de = read_lines(mirror / "train.en.gz"), read_lines(mirror / "train.de.gz")
    with (out / "train.en").open("w", encoding="utf-8") as fe, (out / "train.de").open("w", encoding="utf-8") as fd:
        for i in range(pairs):
            k, j = divmod(i, len(en))
            suffix = f" {k}" if k else ""
            fe.write(en[j] + suffix + "\n")
            fd.write(de[j] + suffix + "\n")


def measure(args: list[str]) -> dict[str, float]:
    """Run `python -m mt ARGS` alone; wall and CPU seconds, peak RSS (MiB) of that process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mt", *args], cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"bench_clean: mt {' '.join(args)} failed ({status})")
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=4_500_000)
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_clean"))
    p.add_argument("--only", choices=sorted(SETTINGS), help="run one setting")
    p.add_argument("--forward", type=Path)
    p.add_argument("--backward", type=Path)
    p.add_argument("--score-pairs", type=int, default=5000)
    p.add_argument("--json", type=Path, help="also write the results here")
    a = p.parse_args()
    corpus = a.work / f"corpus{a.pairs}"
    if not (corpus / "train.de").is_file():
        build(a.mirror, corpus, a.pairs)
    results: dict[str, object] = {"pairs": a.pairs, "cpu": cpu_name()}
    for name, extra in SETTINGS.items():
        if a.only and name != a.only:
            continue
        m = measure(["data", "clean", str(corpus), "-o", str(a.work / f"out_{name}"), "--max-drop", "1", *extra])
        m["pairs_per_s"] = round(a.pairs / m["wall_s"])
        m["pairs_per_cpu_s"] = round(a.pairs / max(m["cpu_s"], 1e-9))
        results[name] = m
        print(name, m, flush=True)
    if a.forward and a.backward:
        small = a.work / f"score{a.score_pairs}"
        build(a.mirror, small, a.score_pairs)
        out = a.work / "out_score"
        m = measure(["data", "clean", str(small), "-o", str(out), "--set", "clean.rules=[]", "--device", "cpu",
                     "--forward", str(a.forward), "--backward", str(a.backward), "--keep", "1"])
        seconds = json.loads((out / "clean_report.json").read_text())["score_seconds"]
        m.update({"score_seconds": seconds, "pairs_per_s": round(a.score_pairs / seconds, 1)})
        results["dual_xent"] = m
        print("dual_xent", m, flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
