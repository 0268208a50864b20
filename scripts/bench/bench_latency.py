"""Batch-1 latency: one sentence at a time through `translate_lines` (what `mt serve` does at
concurrency 1), greedy and beam search, p50/p95 per sentence, in one run.

    .venv/bin/python scripts/bench/bench_latency.py -c runs/multi30k_en_de/checkpoints/best.pt --data data/multi30k
    .venv/bin/python scripts/bench/bench_latency.py -c best.pt --baseline ../mt-main --torch-threads

Each variant runs in its own worker process (this script with `--worker`) that loads the model
once; the main process hands the workers the same sentence in turn, so the variants are
interleaved sentence by sentence and a loaded machine's swings hit them alike. Variants:
- `this tree`: the engine as it is (`mt.decode.engine.NativeEngine`, its thread rule for small
  batches included);
- `--torch-threads`: the same engine with torch's own thread count at every batch size
  (`small_rows=0`), to see what the one-thread rule is worth;
- `--baseline DIR`: another checkout of mt (e.g. main before a change), on the same model.

Reported per variant and search: p50 / p95 / mean milliseconds per sentence (encode, search,
detokenise), milliseconds per decoder step (time over output tokens + EOS of the 1-best, the
output re-encoded), and the
ratio of p50s to the first variant. `CPU p50` is the process CPU time of a sentence: for a
one-thread variant about what the wall time would be on an idle core (a loaded machine inflates
wall time, not CPU time, beyond cache sharing); with two threads it also counts the second
thread's spinning and waiting. Sentences: the first `--limit` of `--split` (default
test_2016_flickr) after `--skip` warm-up ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import typer


def worker(checkpoint: Path, small_rows: int | None) -> None:
    """Serve latency requests on stdin: `{"line": str, "beam": int}` -> `{"ms", "cpu_ms", "tokens", "text"}`."""
    import torch

    from mt.decode.engine import NativeEngine
    from mt.decode.translate import translate_lines
    from mt.model.checkpoint import load_for_inference

    model, tokenizer, cfg = load_for_inference(checkpoint, "cpu")
    engine = NativeEngine(model, "cpu") if small_rows is None else NativeEngine(model, "cpu", small_rows=small_rows)
    print(json.dumps({"ready": True, "threads": torch.get_num_threads()}), flush=True)
    for request in sys.stdin:
        job = json.loads(request)
        decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=job["beam"]))
        start, cpu = time.perf_counter(), time.process_time()
        text = translate_lines(engine, tokenizer, [job["line"]], decode, device="cpu")[0]
        ms, cpu_ms = (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000
        print(json.dumps({"ms": ms, "cpu_ms": cpu_ms, "tokens": len(tokenizer.encode_tgt([text])[0]), "text": text}),
              flush=True)


class Worker:
    """One variant's worker process."""

    def __init__(self, label: str, root: Path, checkpoint: Path, small_rows: int | None) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "-c", str(checkpoint)]
        if small_rows is not None:
            cmd += ["--small-rows", str(small_rows)]
        self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.threads = json.loads(self.proc.stdout.readline())["threads"]

    def translate(self, line: str, beam: int) -> dict:
        self.proc.stdin.write(json.dumps({"line": line, "beam": beam}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main(
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c", help="The model (an mt checkpoint)."),
    data: str | None = typer.Option(None, help="Override data.path (e.g. the Multi30k mirror folder)."),
    split: str = typer.Option("test_2016_flickr", help="Split whose source side is translated."),
    limit: int = typer.Option(100, help="Sentences timed per search."),
    skip: int = typer.Option(3, help="Warm-up sentences before them (not timed)."),
    beams: str = typer.Option("1,5", help="Comma-separated beam sizes (1 = greedy)."),
    torch_threads: bool = typer.Option(False, "--torch-threads", help="Also time torch's own thread count at batch 1."),
    baseline: Path | None = typer.Option(None, help="Also time another mt checkout (its root folder)."),
    worker_mode: bool = typer.Option(False, "--worker", hidden=True),
    small_rows: int | None = typer.Option(None, "--small-rows", hidden=True),
) -> None:
    """p50/p95 latency of one-sentence translation, variants interleaved sentence by sentence."""
    if worker_mode:
        worker(checkpoint, small_rows)
        return
    from mt.data.corpus import read_split
    from mt.model.checkpoint import load_for_inference

    _, _, cfg = load_for_inference(checkpoint, "cpu")
    if data:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=data))
    lines = read_split(cfg.data, split)[0][: skip + limit]
    here = Path(__file__).resolve().parents[2]
    workers = [Worker("this tree", here, checkpoint, None)]
    if torch_threads:
        workers.append(Worker("this tree, torch threads", here, checkpoint, 0))
    if baseline is not None:
        workers.append(Worker(f"baseline {baseline}", baseline.resolve(), checkpoint, None))
    load = os.getloadavg()
    print(f"bench_latency: {checkpoint}, {split}, {limit} sentences one at a time (after {skip} warm-up), "
          f"torch threads {workers[0].threads}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'search':<8} {'variant':<40} {'p50 ms':>7} {'p95 ms':>7} {'mean ms':>8} {'ms/step':>8} {'CPU p50':>8} "
          f"{'p50 ratio':>9}")
    try:
        for beam in (int(b) for b in beams.split(",")):
            label = "greedy" if beam == 1 else f"beam {beam}"
            times: dict[str, list[float]] = {w.label: [] for w in workers}
            cpu: dict[str, list[float]] = {w.label: [] for w in workers}
            steps: dict[str, int] = {w.label: 0 for w in workers}
            texts: dict[str, list[str]] = {w.label: [] for w in workers}
            for i, line in enumerate(lines):
                for w in workers:  # the same sentence, variant after variant
                    got = w.translate(line, beam)
                    if i >= skip:
                        times[w.label].append(got["ms"])
                        cpu[w.label].append(got["cpu_ms"])
                        steps[w.label] += got["tokens"] + 1
                        texts[w.label].append(got["text"])
            first = float(np.percentile(times[workers[0].label], 50))
            for w in workers:
                t = np.array(times[w.label])
                p50 = float(np.percentile(t, 50))
                same = "" if w is workers[0] else (" same text" if texts[w.label] == texts[workers[0].label]
                                                   else " TEXT DIFFERS")
                print(f"{label:<8} {w.label:<40} {p50:7.1f} {np.percentile(t, 95):7.1f} {t.mean():8.1f} "
                      f"{t.sum() / steps[w.label]:8.2f} {np.percentile(cpu[w.label], 50):8.1f} {p50 / first:9.2f}{same}",
                      flush=True)
    finally:
        for w in workers:
            w.close()
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    typer.run(main)
