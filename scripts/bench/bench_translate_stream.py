"""Peak memory of `mt translate` against input size: streaming keeps it flat (not a unit test).

    .venv/bin/python scripts/bench/bench_translate_stream.py                       # 10k, 100k, 1M lines
    .venv/bin/python scripts/bench/bench_translate_stream.py --lines 1000 20000    # a quick look

For each input size a file of synthetic sentences (seeded, several scripts, 1-12 words) is
translated by the real CLI (`python -m mt translate -i FILE -o OUT --device cpu`, one thread)
with a tiny random-weight model (mt/deploy/tiny.py: greedy, outputs of at most
0.5 x |source| + 5 pieces), so the run measures the plumbing — reading, encoding, batching,
writing — not a real model. Reported per size: the child's peak RSS (getrusage ru_maxrss of the
finished process), wall time, lines/s, and whether the output has one line per input line.
With streaming, peak RSS should stay near the 10k-line figure at 1M lines; the whole-file
design it replaced grew linearly (all lines, their ids and the outputs held at once).
Run it on a quiet machine; name the CPU beside any figure you quote.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def write_input(path: Path, lines: int, seed: int) -> None:
    """`lines` synthetic sentences, written in blocks (the generator itself stays small)."""
    with path.open("w", encoding="utf-8") as f:
        done = 0
        while done < lines:
            block = synthetic_sentences(min(50_000, lines - done), seed + done)
            f.write("\n".join(block) + "\n")
            done += len(block)


def measure(checkpoint: Path, src: Path, out: Path) -> tuple[int, float, int]:
    """(return code, seconds, peak RSS in MiB) of one `mt translate` child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(checkpoint), "-i", str(src), "-o",
                           str(out), "--device", "cpu"], env=env, check=False, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux: max over finished children
    if proc.returncode != 0:
        print(proc.stderr.strip()[-1000:], file=sys.stderr)
    if peak <= before:
        print("warning: peak RSS not above an earlier child's; run sizes in increasing order", file=sys.stderr)
    return proc.returncode, seconds, peak // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="input sizes, increasing (ru_maxrss is a maximum over all finished children)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None, help="where inputs go (default: a temp folder)")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus (see lscpu); "
          f"python {platform.python_version()}")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        checkpoint = write_random_checkpoint(work / "tiny.pt", seed=args.seed)
        print(f"{'lines':>10} {'peak RSS MiB':>13} {'seconds':>9} {'lines/s':>9}  lines out")
        failed = False
        for n in sorted(args.lines):
            src, out = work / f"in.{n}.txt", work / f"out.{n}.txt"
            write_input(src, n, args.seed)
            code, seconds, rss = measure(checkpoint, src, out)
            with out.open("rb") as f:
                got = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b"")) if code == 0 else -1
            ok = code == 0 and got == n
            failed |= not ok
            print(f"{n:>10,} {rss:>13,} {seconds:>9.1f} {n / seconds:>9,.0f}  {got:,} {'OK' if ok else 'FAIL'}")
            src.unlink()
            out.unlink(missing_ok=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
