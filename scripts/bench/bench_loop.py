"""The training loop's speed against its own bare step (issue 63): what the loop costs around the step.

    nice .venv/bin/python scripts/bench/bench_loop.py --run runs/multi30k_en_de --updates 100 --repeats 3

Loop: `mt.train.loop.train` on a copy of a prepared run (its config.yaml, data and tokenizer),
`--updates` updates with a log line every `--every`; tokens/s are the train lines' (target tokens
over the window's wall time: batches, agreement, LR, logging, everything but validation). Bare
step: the same model, optimizer and batches (epoch 1's first `--updates`, collated beforehand),
`UpdateStep` called back to back. Both drop the first window (warm-up). Repeats alternate the
two; medians are reported (a shared machine: a slow spell falls on both).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mt.config import Config
from mt.config_load import load_config
from mt.data.splits import load_split
from mt.data.tokenizer import Tokenizer
from mt.device import resolve_device
from mt.model.transformer import Transformer
from mt.train.compiled import compile_forward, plan_step
from mt.train.distributed import DistInfo
from mt.train.epochs import TrainingData
from mt.train.feed import epoch_feed
from mt.train.log import PhaseTimer
from mt.train.loop import train
from mt.train.optim import build_optimizer, set_lr
from mt.train.step import UpdateStep


def bench_config(run: Path, root: Path, args: argparse.Namespace) -> Config:
    """The run's config on a copy of its prepared data under `root`, for `args.updates` updates, no validation
    (nor the closing alpha or confidence fit: beam decodes of val that the loop's tokens/s never see)."""
    cfg = load_config(run / "config.yaml")
    dest = root / cfg.name
    dest.mkdir(parents=True)
    shutil.copytree(run / "data", dest / "data")
    for model in run.glob("*.model"):
        shutil.copy2(model, dest / model.name)
    t = dataclasses.replace(cfg.train, max_updates=args.updates, max_epochs=0, time_budget="", log_every=args.every,
                            valid_every=0, valid_epoch_end=False, valid_bleu=False, save_every=0, keep_checkpoints=0,
                            average_last=0, fit_alpha=False, fit_confidence=False, warmup=min(100, args.updates),
                            threads=args.threads, precision=args.precision, data_workers=args.workers)
    data = dataclasses.replace(cfg.data, path=str(args.data)) if args.data else cfg.data
    return dataclasses.replace(cfg, run_root=str(root), train=t, data=data)


def loop_tok_s(cfg: Config) -> float:
    """Median target tokens/s of the loop's train lines after the first."""
    train(cfg)
    lines = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    return statistics.median([r["tok_s"] for r in lines if r["kind"] == "train"][1:])


def step_tok_s(cfg: Config, every: int) -> float:
    """Median target tokens/s of the bare step over windows of `every` updates after the first."""
    run_dir, t = cfg.run_dir, cfg.train
    torch.set_num_threads(t.threads) if t.threads > 0 else None
    tokenizer = Tokenizer.from_files(run_dir)
    split = load_split(run_dir, cfg.data.train_split)
    torch.manual_seed(t.seed)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint)
    device = resolve_device(t.device)
    model = model.to(device)
    plan = plan_step(t, cfg.model, device, 1)
    model.attention_kernel = "flex" if plan.flex else "sdpa"
    epoch = TrainingData(cfg, run_dir, split, tokenizer, DistInfo(), lambda _: None, plan.max_shapes).epoch(1)
    feed = epoch_feed(epoch.split, epoch.batches[:t.max_updates], epoch.sampler, 0, multiple=max(t.pad_multiple, 1),
                      workers=0, pin=False)
    batches = [b.to(device) for b in feed]  # on the device already: the bare step
    optimizer = build_optimizer(model, t)
    step = UpdateStep(model=model, ddp=model, optimizer=optimizer, scaler=None, t=t, info=DistInfo(), device=device,
                      timer=PhaseTimer(), precision=t.precision, forward=compile_forward(model, plan))
    # (compiled: the first window holds the compilations and is dropped like every first window)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rates = []
    for start in range(0, len(batches) - every + 1, every):
        sync()
        began, tokens = time.perf_counter(), 0
        for b in batches[start:start + every]:
            set_lr(optimizer, 1e-4)
            step([b], scale=1.0 / b.num_tgt_tokens)
            tokens += b.num_tgt_tokens
        sync()
        rates.append(tokens / (time.perf_counter() - began))
    return statistics.median(rates[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a prepared run directory (config.yaml, data/, *.model)")
    ap.add_argument("--data", type=Path, help="the corpus directory, if not the config's data.path")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--every", type=int, default=20, help="updates per timed window (the loop's log_every)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--workers", type=int, default=-1, help="train.data_workers (-1: auto)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    loops, steps = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = bench_config(args.run, Path(tmp), args)
            steps.append(step_tok_s(cfg, args.every))
            loops.append(loop_tok_s(cfg))
    loop, step = statistics.median(loops), statistics.median(steps)
    result = {"cpu": platform.processor() or platform.machine(), "threads": args.threads, "updates": args.updates,
              "loop_tok_s": round(loop), "step_tok_s": round(step), "loop_over_step": round(loop / step, 4),
              "loops": [round(x) for x in loops], "steps": [round(x) for x in steps]}
    print(f"loop {loop:,.0f} tgt tok/s, bare step {step:,.0f} tgt tok/s: the loop at {loop / step:.1%} of its step "
          f"(medians of {args.repeats}; loops {result['loops']}, steps {result['steps']})")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
