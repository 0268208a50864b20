"""Benchmark `mt prepare` on a corpus larger than memory-friendly sizes (issue #7).

Multi30k train is replicated to --pairs sentence pairs (default 4.5M, the size of WMT14 en-de),
then the real `prepare` runs on it once per --workers value, each in a fresh process so that peak
RSS is that run's own. Reported: wall time, sentence pairs/s (whole stage and encoding only),
sentencepiece training time, CPU seconds (main + workers: unaffected by other load on the machine),
peak RSS of the main process (exact), and of the main process plus its workers (summed PSS, sampled
every 0.2 s) over the whole stage and over the encoding phase alone: the sentencepiece sample is
bounded by --sample-size, and encoding memory must not grow with --pairs. Last, the time from
launching `mt train` on the prepared corpus to its first update (goal: under 30 s).

    .venv/bin/python scripts/bench/bench_prepare.py --pairs 300000          # a quick check
    .venv/bin/python scripts/bench/bench_prepare.py                         # the full 4.5M pairs, workers 1 and 2
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _read_gz_or_text(folder: Path, name: str) -> list[bytes]:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            return raw.splitlines(keepends=True)
    sys.exit(f"bench_prepare: {folder / name}(.gz) not found; run `mt data fetch multi30k` first")


def build_corpus(source: Path, out: Path, pairs: int) -> None:
    """Write train.{en,de} with Multi30k train repeated to `pairs` lines, and copy val."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        lines = _read_gz_or_text(source, f"train.{lang}")
        with (out / f"train.{lang}").open("wb") as f:
            full, rest = divmod(pairs, len(lines))
            block = b"".join(lines)
            for _ in range(full):
                f.write(block)
            f.write(b"".join(lines[:rest]))
        (out / f"val.{lang}").write_bytes(b"".join(_read_gz_or_text(source, f"val.{lang}")))


def _rss_kib(pid: int) -> int:
    """Proportional set size (shared pages split between sharers, so forked workers are not double
    counted), else plain RSS where smaps_rollup is unavailable."""
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
        except (OSError, ValueError):
            continue
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


class RssSampler(threading.Thread):
    """Samples the summed RSS of this process and its children every `interval` s; `.peak_mib` is the max.

    (ru_maxrss cannot give this: a child's ru_maxrss starts at its parent's RSS, since Linux keeps it across exec.)
    """

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval, self.stop = interval, threading.Event()
        self.samples: list[tuple[float, int]] = []  # (perf_counter, KiB)

    def run(self) -> None:
        pid = os.getpid()
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), _rss_kib(pid) + sum(_rss_kib(c) for c in _children(pid))))
            self.stop.wait(self.interval)

    def peak_mib(self, since: float = 0.0) -> float:
        """Peak summed RSS over the samples taken at or after `since` (a perf_counter time)."""
        return max((kib for t, kib in self.samples if t >= since), default=0) / 1024


def child(config_path: str) -> None:
    """Run one prepare (forced) and print its figures as one JSON line."""
    from mt.config_load import load_config
    from mt.data.prepare import prepare

    cfg = load_config(config_path)
    sampler = RssSampler()
    sampler.start()
    start = time.perf_counter()
    run_dir = prepare(cfg, force=True)
    wall = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    manifest = json.loads((run_dir / "data" / "manifest.json").read_text())
    # Encoding is the last phase of prepare (only renames follow it).
    encode_start = start + manifest["total_seconds"] - manifest["encode_seconds"]
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("BENCH " + json.dumps({
        "workers": cfg.tokenizer.workers, "wall_s": wall, "encode_s": manifest["encode_seconds"],
        "pairs": sum(s["sentences"] for s in manifest["splits"].values()),
        # CPU seconds of this process and its (exited) workers: independent of other load on the machine.
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        # ru_maxrss is in KiB on Linux; exact for the main process.
        "peak_rss_main_mib": me.ru_maxrss / 1024,
        "peak_rss_total_mib": sampler.peak_mib(),
        "peak_rss_encoding_mib": sampler.peak_mib(since=encode_start),
    }), flush=True)


def time_to_first_update(cfg_path: Path) -> float:
    """Seconds from launching `mt train` on a prepared run until it logs update 1 (the process is
    then stopped): loading the memory-mapped cache, building the model and the epoch's batches."""
    args = [sys.executable, "-u", "-m", "mt", "train", str(cfg_path), "--set", "train.log_every=1",
            "--set", "train.max_updates=2", "--set", "train.valid_bleu=false", "--set", "train.time_budget=",
            "--set", "train.threads=2"]
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if " update 1 |" in line:
                return time.perf_counter() - start
        sys.exit(f"bench_prepare: `mt train` ended without logging update 1 (exit {proc.wait()})")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4_500_000, help="training sentence pairs (Multi30k train repeated)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="tokenizer.workers values to run")
    parser.add_argument("--sample-size", type=int, default=300_000, help="tokenizer.sample_size (pairs)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--data", type=Path, default=REPO / "data" / "multi30k", help="folder with Multi30k train/val")
    parser.add_argument("--workdir", type=Path, default=None, help="where the corpus and runs go (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_prepare."))
    try:
        t0 = time.perf_counter()
        build_corpus(args.data, work / "corpus", args.pairs)
        size_mb = sum(p.stat().st_size for p in (work / "corpus").iterdir()) / 1e6
        print(f"corpus: {args.pairs:,} pairs ({size_mb:,.0f} MB of text) built in {time.perf_counter() - t0:.1f}s")
        results = []
        for workers in args.workers:
            from mt.config_load import load_config, save_config

            cfg = load_config(REPO / "configs" / "multi30k_en_de.yaml", [
                f"name=bench_w{workers}", f"run_root={work / 'runs'}", f"data.path={work / 'corpus'}",
                "data.test_splits=[]", f"tokenizer.workers={workers}", f"tokenizer.sample_size={args.sample_size}",
                f"tokenizer.vocab_size={args.vocab_size}"])
            cfg_path = work / f"bench_w{workers}.yaml"
            save_config(cfg, cfg_path)
            proc = subprocess.run([sys.executable, __file__, "--child", str(cfg_path)], cwd=REPO,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"bench_prepare: prepare with {workers} worker(s) failed:\n{proc.stderr[-2000:]}")
            line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH "))
            r = json.loads(line[len("BENCH "):])
            r["pairs_per_s"] = r["pairs"] / r["wall_s"]
            r["encode_pairs_per_s"] = r["pairs"] / r["encode_s"]
            r["spm_and_sampling_s"] = r["wall_s"] - r["encode_s"]
            r["config"] = str(cfg_path)
            results.append(r)
            print(f"workers={workers}: {r['wall_s']:.1f}s wall ({r['spm_and_sampling_s']:.1f}s sample + sentencepiece, "
                  f"{r['encode_s']:.1f}s encoding), {r['pairs_per_s']:,.0f} pairs/s overall, "
                  f"{r['encode_pairs_per_s']:,.0f} pairs/s encoding, {r['cpu_s']:.1f} CPU-s; peak RSS "
                  f"{r['peak_rss_main_mib']:.0f} MiB main, {r['peak_rss_total_mib']:.0f} MiB main + workers (PSS), "
                  f"{r['peak_rss_encoding_mib']:.0f} MiB while encoding (sampled)", flush=True)
        first_update_s = time_to_first_update(Path(results[-1]["config"]))
        print(f"mt train on the prepared {args.pairs:,} pairs: first update after {first_update_s:.1f}s", flush=True)
        summary = {"pairs": args.pairs, "sample_size": args.sample_size, "vocab_size": args.vocab_size, "runs": results,
                   "train_start_to_first_update_s": first_update_s}
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
