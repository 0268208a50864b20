"""CPU speed of the distillation experiment's models: teacher, student on references, distilled
student, each native and exported to CTranslate2 int8, offline (`mt translate`'s `translate_lines`)
and served through `mt serve` at concurrency 1 and 32, greedy and beam 5.

    python scripts/experiments/exp_distill_speed.py --bring out/exp_distill/bring --src data/multi30k/test_2016_flickr.en.gz \\
        --out out/exp_distill_speed -n 300

`--bring` is the folder scripts/experiments/exp_distill.py filled (compact checkpoints cut into parts,
results.json): the checkpoints are put together and checked against their sha256, each is exported (`mt export --format ctranslate2 --quantization int8`) and measured by
scripts/bench/bench_serve.py (one process per model, `--threads` model threads; the load generator
shares the machine: say so with the figures). Writes `speed.json` and `speed.md` (with each
model's test BLEU from results.json and its speed relative to the teacher) into --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMES = ("teacher", "student_ref", "student_distilled")


def assemble(bring: Path, name: str, dest: Path, expected: str) -> Path:
    """`name.pt` from its parts in `bring`, checked against its sha256 (results.json's)."""
    parts = sorted(bring.glob(f"{name}.pt.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))
    data = b"".join(p.read_bytes() for p in parts)
    if hashlib.sha256(data).hexdigest() != expected:
        sys.exit(f"{name}.pt: its parts in {bring} do not make the checkpoint results.json names (sha256 differs)")
    path = dest / f"{name}.pt"
    path.write_bytes(data)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bring", type=Path, required=True, help="exp_distill.py's --bring folder")
    p.add_argument("--src", type=Path, default=REPO / "data" / "multi30k" / "test_2016_flickr.en.gz")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("-n", type=int, default=300, help="sentences (requests) per level")
    p.add_argument("--threads", type=int, default=1, help="model threads, offline and served")
    p.add_argument("--cap-s", type=float, default=60.0, help="time cap per level")
    a = p.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = json.loads((a.bring / "results.json").read_text())
    speed: dict = {}
    for name in NAMES:
        ckpt = assemble(a.bring, name, out, results["checkpoints"][name]["sha256"])
        export = out / f"{name}_ct2_int8"
        if not export.is_dir():
            subprocess.run([sys.executable, "-m", "mt", "export", str(ckpt), "--format", "ctranslate2", "--quantization",
                            "int8", "-o", str(export), "--no-check"], check=True, cwd=REPO)
        report = out / f"{name}.serve.json"
        subprocess.run([sys.executable, str(REPO / "scripts" / "bench_serve.py"), "-c", str(ckpt), "--export", str(export),
                        "--src", str(a.src), "-n", str(a.n), "--concurrency", "1", "32", "--beams", "1", "5",
                        "--threads", str(a.threads), "--cap-s", str(a.cap_s), "--out", str(report)], check=True, cwd=REPO)
        speed[name] = json.loads(report.read_text())
    (out / "speed.json").write_text(json.dumps(speed, indent=1) + "\n")
    lines = [f"CPU: {speed['teacher']['cpu']}, {a.threads} model thread(s), {a.n} sentences of {a.src.name}; "
             "segments/s (x the teacher's)", "",
             "| model | BLEU | engine | offline greedy | offline beam 5 | served c1 greedy | served c1 beam 5 | "
             "served c32 greedy | served c32 beam 5 |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name in NAMES:
        for engine in ("native", "ct2"):
            r, base = speed[name][engine], speed["teacher"][engine]
            cells = [f"{r['offline_seg_per_s'][b]} ({r['offline_seg_per_s'][b] / base['offline_seg_per_s'][b]:.2f}x)"
                     for b in ("1", "5")]
            for c in (1, 32):
                for b in (1, 5):
                    mine = next(x for x in r["levels"] if x["concurrency"] == c and x["beam"] == b)["seg_per_s"]
                    theirs = next(x for x in base["levels"] if x["concurrency"] == c and x["beam"] == b)["seg_per_s"]
                    cells.append(f"{mine} ({mine / theirs:.2f}x)")
            bleu = results["bleu"][name]
            lines.append(f"| {name} | {bleu:.2f} | {'CTranslate2 int8' if engine == 'ct2' else 'mt fp32'} | "
                         + " | ".join(cells) + " |")
    (out / "speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
