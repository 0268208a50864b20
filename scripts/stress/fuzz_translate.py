"""Feed fuzzed lines through the real `mt translate` and check the line contract (not a unit test).

    .venv/bin/python scripts/stress/fuzz_translate.py                  # 10,000 lines, tiny random model
    .venv/bin/python scripts/stress/fuzz_translate.py --lines 500 --checkpoint runs/x/checkpoints/best.pt

The lines (seeded) mix: empty and whitespace-only lines, ASCII control characters and NUL,
Unicode separators (U+2028, U+0085, form feed, CR), mixed scripts, combining marks, emoji,
right-to-left text, private-use and unassigned code points, and a few 10,000-character lines.
The contract: exactly one output line per input line, in order (counted on b"\\n"; no output
line may contain a line break). A second run appends one line holding a lone surrogate written
as bytes (invalid UTF-8): it must fail with one line on stderr naming the input line, exit 2,
and leave the output file it was given untouched.

Without --checkpoint a tiny random-weight model is built (mt/deploy/tiny.py), so the
time reported is the plumbing's (tokenise, batch, greedy search, detokenise, write), not a
real model's. Exit code 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mt.deploy.tiny import write_random_checkpoint

ROOT = Path(__file__).resolve().parents[2]
_SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
_SCRIPTS = ["hello world", "Grüße aus Köln", "Ελληνικά", "русский текст", "中文字符", "日本語のテキスト",
            "한국어", "עברית", "العربية", "हिन्दी", "🙂👍🏽", "e\u0301\u0301\u0301", "\ue000\uf8ff", "\U000e0001"]


def fuzz_line(rng: random.Random) -> str:
    """One line a user could plausibly (or implausibly) feed in; never contains '\\n'."""
    kind = rng.randrange(10)
    if kind == 0:
        return ""
    if kind == 1:
        return "".join(rng.choice([" ", "\t", "\u3000", "\u00a0", "\u200b"]) for _ in range(rng.randint(1, 8)))
    if kind == 2:
        return "".join(chr(rng.choice([0, *range(1, 9), 11, 12, *range(14, 32), 127])) for _ in range(rng.randint(1, 6)))
    if kind == 3:
        return rng.choice(_SCRIPTS) + rng.choice(_SEPARATORS) + rng.choice(_SCRIPTS)
    if kind == 4:
        return "".join(chr(rng.randint(0x20, 0x2FFFF)) for _ in range(rng.randint(1, 30))
                       ).encode("utf-8", "replace").decode("utf-8", "replace").replace("\n", " ")
    if kind == 5 and rng.random() < 0.005:
        return "".join(rng.choice(_SCRIPTS) + " " for _ in range(2000))[:10_000]
    return " ".join(rng.choice(_SCRIPTS) for _ in range(rng.randint(1, 6)))


def run_translate(checkpoint: Path, src: Path, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(checkpoint), "-i", str(src),
                           "-o", str(out), "--device", "cpu"], capture_output=True, text=True, env=env, check=False)
    return proc, time.perf_counter() - start


def main(lines: int, seed: int, checkpoint: Path | None) -> int:
    """Run both checks; returns the exit code (1 when any failed)."""
    rng = random.Random(seed)
    inputs = [fuzz_line(rng) for _ in range(lines)]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ckpt = checkpoint or write_random_checkpoint(work / "tiny.pt", seed=seed)
        src, out = work / "in.txt", work / "out.txt"
        src.write_bytes("".join(line + "\n" for line in inputs).encode("utf-8"))
        proc, seconds = run_translate(ckpt, src, out)
        got = out.read_bytes().split(b"\n")[:-1] if out.is_file() else []
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; model: {ckpt}")
        print(f"lines in {len(inputs)}, lines out {len(got)}: {'OK' if len(got) == len(inputs) else 'MISMATCH'}; "
              f"exit {proc.returncode}; {seconds:.1f} s ({len(inputs) / seconds:,.0f} lines/s, process start included)")
        if proc.returncode != 0 or len(got) != len(inputs):
            failures.append(f"line contract broken (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        breaks = sum(1 for raw in got if len(raw.decode("utf-8", "replace").splitlines()) > 1)
        print(f"output lines holding another line-break character (str.splitlines would split them): {breaks}")
        # Segmenting keeps whitespace where it was: an empty or whitespace-only line comes back as itself.
        empty_in = [i for i, line in enumerate(inputs) if not line.strip()]
        if got and any(got[i].decode("utf-8", "replace") != inputs[i] for i in empty_in if i < len(got)):
            failures.append("an empty or whitespace-only input line did not come back as itself")

        before = out.read_bytes() if out.is_file() else b""
        with src.open("ab") as f:
            f.write(b"lone surrogate: \xed\xa0\x80 here\n")
        proc, _ = run_translate(ckpt, src, out)
        stderr = proc.stderr.strip().splitlines()
        # Warnings about earlier lines (e.g. truncated long ones) may come first; the failure is one line.
        errors = [line for line in stderr if not line.startswith("mt: warning:")]
        clean = (proc.returncode == 2 and len(errors) == 1 and errors[0].startswith("mt: error:")
                 and f"line {len(inputs) + 1}" in errors[0] and "Traceback" not in proc.stderr
                 and out.read_bytes() == before)
        print(f"invalid UTF-8 at line {len(inputs) + 1}: exit {proc.returncode}, error lines {errors}, "
              f"output untouched {out.read_bytes() == before}: {'OK' if clean else 'FAIL'}")
        if not clean:
            failures.append("invalid UTF-8 was not one clean failure")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=10_000, help="fuzzed input lines")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fuzzer (and of the random model)")
    parser.add_argument("--checkpoint", type=Path, default=None, help="translate with this checkpoint instead")
    args = parser.parse_args()
    sys.exit(main(args.lines, args.seed, args.checkpoint))
