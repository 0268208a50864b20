"""Batch shapes and padding of one epoch: today's packing against the shape grid (issue 63).

    python scripts/bench/bench_shapes.py --run runs/multi30k_en_de --max-tokens 2000 --max-shapes 8 16 32 48

For a prepared run's training split: per batching (as packed; widths padded to 4 as bf16 on CPU
does; the grid of `train.max_shapes` K), the batches of epoch 1, the distinct batch shapes
(B, S, T) and the padded tokens B * (S + T) summed, against the real tokens (|x| + 1 + |y| + 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mt.data.batching import TokenBatchSampler, padded_width
from mt.data.splits import load_split


def epoch_figures(src: np.ndarray, tgt: np.ndarray, max_tokens: int, **options: int) -> tuple[int, int, int]:
    """(batches, shapes, padded tokens) of epoch 1."""
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, max_sentences=512, seed=1, **options)
    multiple = options.get("pad_multiple", 1)
    shapes, padded = set(), 0
    batches = sampler.epoch_batches(1)
    for b in batches:
        shape = sampler.shape_of(b) or (len(b), int(padded_width(int(src[b].max()) + 1, multiple)),
                                        int(padded_width(int(tgt[b].max()) + 1, multiple)))
        shapes.add(shape)
        padded += shape[0] * (shape[1] + shape[2])
    return len(batches), len(shapes), padded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a prepared run directory")
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--max-shapes", type=int, nargs="+", default=[8, 16, 32, 48])
    args = ap.parse_args()
    split = load_split(args.run, "train")
    src, tgt = split.src.lengths(), split.tgt.lengths()
    real = int((src + 1).sum() + (tgt + 1).sum())
    print(f"{len(src)} pairs, {real:,} real tokens, max_tokens {args.max_tokens}")
    print(f"{'batching':<26}{'batches':>8}{'shapes':>8}{'padded tokens':>15}{'over real':>10}")
    rows = [("as packed", {}), ("widths to a multiple of 4", {"pad_multiple": 4})]
    rows += [(f"grid, K = {k}", {"max_shapes": k}) for k in args.max_shapes]
    for name, options in rows:
        n, shapes, padded = epoch_figures(src, tgt, args.max_tokens, **options)
        print(f"{name:<26}{n:>8}{shapes:>8}{padded:>15,}{padded / real - 1:>+10.1%}")


if __name__ == "__main__":
    main()
