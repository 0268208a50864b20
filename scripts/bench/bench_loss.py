"""Time the trainer's fused loss (output projection + label-smoothed NLL, forward + backward) by
route of its float32 products: MKL (plain `torch.mm`, what Intel CPUs get) against oneDNN on a
weight packed once per update (what other CPUs get; `mt.train.loss._Products`).

    .venv/bin/python scripts/bench/bench_loss.py                   # demo shapes: 1,200 targets, D 192, V 8,000
    .venv/bin/python scripts/bench/bench_loss.py --rounds 40 --threads 2

Each round runs every route once on the same inputs, routes taking turns, so a slow spell of a
shared machine falls on all of them; the script prints min and median milliseconds per call and
the ratio of each route to MKL. The route is picked by the vendor `mt.train.loss` sees, which the
script sets per call; the unfused reference (`F.linear` + `label_smoothed_nll`, autograd) is
printed beside them. float32 only: bf16 products always go to oneDNN.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import mt.device
import mt.train.loss as fused_loss
from mt.device import cpu_isa, cpu_name, cpu_vendor


def timed_call(fn: Callable[[], None]) -> float:
    """Milliseconds of one call of fn."""
    t0 = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=1200, help="real target positions per batch")
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hidden = torch.randn(1, args.targets, args.d_model, requires_grad=True)
    weight = (torch.randn(args.vocab, args.d_model) * args.d_model ** -0.5).requires_grad_()
    target = torch.randint(4, args.vocab, (1, args.targets))

    def fused(vendor: str) -> Callable[[], None]:
        def run() -> None:
            mt.device.cpu_vendor = lambda: vendor  # the route prefers_onednn_linear picks for this call
            loss, _, _ = fused_loss.projected_smoothed_nll(hidden, weight, None, target, 0.1)
            loss.backward()
        return run

    def unfused() -> None:
        loss, _, _ = fused_loss.label_smoothed_nll(F.linear(hidden, weight), target, 0.1)
        loss.backward()

    routes = {"fused, MKL products": fused("GenuineIntel"), "fused, oneDNN packed": fused("AuthenticAMD"),
              "unfused (autograd)": unfused}
    times: dict[str, list[float]] = {name: [] for name in routes}
    for r in range(args.warmup + args.rounds):
        for name, fn in routes.items():
            hidden.grad = weight.grad = None
            ms = timed_call(fn)
            if r >= args.warmup:
                times[name].append(ms)
    print(f"CPU: {cpu_name()} ({cpu_vendor()}, {cpu_isa()}); torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.targets} targets x D {args.d_model} x V {args.vocab}, float32, {args.rounds} rounds"
          f"{'' if mt.device.onednn_linear_available() else ' (this torch has no oneDNN packed linear: both fused rows are MKL)'}")
    base_min, base_med = min(times["fused, MKL products"]), statistics.median(times["fused, MKL products"])
    print("| route | min ms | median ms | min / MKL | median / MKL |\n|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        lo, med = min(ts), statistics.median(ts)
        print(f"| {name} | {lo:.1f} | {med:.1f} | {lo / base_min:.2f} | {med / base_med:.2f} |")


if __name__ == "__main__":
    main()
