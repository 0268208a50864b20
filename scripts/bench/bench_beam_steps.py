"""Time every beam-search decoder step by how many sentences are still searching: where a
batched round's time goes (its full steps against its tail), and what one step costs per
sentence at each batch size (docs/performance.md, "Decoding").

    .venv/bin/python scripts/bench/bench_beam_steps.py -c runs/multi30k_en_de/checkpoints/best.pt --chunks 1 32

`translate_lines` runs over the first -n source lines in calls of each --chunks size (twice:
the first pass warms up); each `BeamState.decode` (the cache reorder and one decoder step) is
timed and counted under the live sentences of its search, in bins of --bin.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import time
from collections import defaultdict
from pathlib import Path

import torch

import mt.decode.beam as beam
from mt.decode.translate import translate_lines
from mt.deploy.loading import load_model
from mt.device import cpu_name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--checkpoint", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=Path("data/multi30k/test_2016_flickr.en.gz"))
    ap.add_argument("-n", type=int, default=320, help="source lines")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 32], help="lines per translate_lines call")
    ap.add_argument("--bin", type=int, default=4, help="live sentences per table row")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 = default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model([args.checkpoint], "cpu")
    engine, tokenizer, cfg, device = loaded.engine, loaded.tokenizer, loaded.config, loaded.device
    opener = gzip.open if args.src.suffix == ".gz" else open
    with opener(args.src, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][: args.n]
    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=args.beam))

    steps: list[tuple[int, float]] = []  # (live sentences, seconds) per decoder step
    timed_decode = beam.BeamState.decode

    def decode_step(self: beam.BeamState, model: beam.Seq2Seq) -> torch.Tensor:
        t0 = time.perf_counter()
        out = timed_decode(self, model)
        steps.append((int(self.sent.numel()), time.perf_counter() - t0))
        return out

    beam.BeamState.decode = decode_step  # type: ignore[method-assign]
    print(f"CPU: {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          f"{len(lines)} lines, beam {args.beam}")
    for chunk in args.chunks:
        for _ in range(2):  # the second pass counts
            steps.clear()
            t0 = time.perf_counter()
            for i in range(0, len(lines), chunk):
                translate_lines(engine, tokenizer, lines[i:i + chunk], decode, device=device)
            total = time.perf_counter() - t0
        in_steps = sum(s for _, s in steps)
        print(f"\ncalls of {chunk}: {len(lines) / total:.1f} seg/s; {len(steps)} decoder steps, {in_steps:.2f} s "
              f"of {total:.2f} s")
        bins: dict[int, list[float]] = defaultdict(list)
        for live, seconds in steps:
            bins[(live - 1) // args.bin if live < chunk else -1].append(seconds)
        print("| live sentences | steps | ms per step | share of step time |")
        print("|---:|---:|---:|---:|")
        for key in sorted(bins, key=lambda k: (k < 0, k)):
            span = str(chunk) if key < 0 else f"{key * args.bin + 1}-{min((key + 1) * args.bin, chunk - 1)}"
            times = bins[key]
            print(f"| {span} | {len(times)} | {1000 * sum(times) / len(times):.2f} | "
                  f"{100 * sum(times) / max(in_steps, 1e-12):.0f}% |")


if __name__ == "__main__":
    main()
