"""Benchmark mt.model.transformer.Transformer training and forward throughput against torch.nn.Transformer and
Hugging Face's MarianMTModel of the same dimensions.

    .venv/bin/python scripts/bench/bench_model.py                       # default config, fp32 + bf16
    .venv/bin/python scripts/bench/bench_model.py --steps 5 --warmup 1  # a quick look
    .venv/bin/python scripts/bench/bench_model.py --no-reference --profile  # where mt's step goes, its MFU ceiling

Batches come from the prepared training split of the config (runs/<name>/data) when it exists,
otherwise from synthetic Multi30k-like lengths (source ~13 +- 4, target ~15 +- 5 subwords),
cut by mt.data.batching.TokenBatchSampler at the config's train.max_tokens. One training step is
forward + label-smoothed loss + backward + AdamW step. mt's step is the trainer's:
mt.train.step's batch_loss (the output projection fused into the loss) and mt.train.optim's
build_optimizer. The peers' step is the usual recipe: F.cross_entropy with label_smoothing,
torch.optim.AdamW with its defaults. Marian is always post-LN (BART-style, it has no pre-LN
option), random-initialised, with tied embeddings, dropout as the config and the mt batches.

Throughput is real target tokens (|y| + 1 per sentence) per second, from the best of --rounds
timed passes over the same batches, the models taking turns (so a slow spell of a shared
machine falls on all of them alike). MFU = achieved model FLOP/s over the measured matmul peak
of the same precision, with training FLOPs = 6 x parameters touched per real token (source-side
parameters once per source token, target-side ones once per target token; attention score
products are left out) and forward FLOPs = 2 x the same. The peak is read before and after the
models are timed, and the higher reading counts.

--profile adds, per precision, the per-part table of mt's step and the MFU ceiling its own matrix
products set when each is replayed alone (scripts/bench/step_profile.py; docs/performance.md, issue 46).

GPU mode (issue 63), what scripts/bench/gpu_check.sh runs:

    python scripts/bench/bench_model.py --device cuda --size base --lengths wmt --max-tokens 12500 50000 \
        --precision bf16 --modes eager compiled graphs --max-shapes 32 --json out/bench.json

--size base is transformer-base (d 512, 8 heads, 6 + 6 layers, FFN 2048, vocab 32,000, synthetic
batches); --lengths wmt draws WMT-like lengths (source ~25 +- 12 subwords). Every model trains on
the same batches (with --max-shapes K, the trainer's shape grid: few shapes, so a compiled step
compiles each once during the warm-up pass). --modes adds mt compiled as the trainer compiles it
(FlexAttention key padding on CUDA) and compiled + CUDA graphs (CUDA only). On a GPU the peak is
the best bf16/fp32 matrix product measured in the same run, timing waits for the device, and
each mode gets a kernel profile per step (scripts/bench/gpu_profile.py: time by kernel family,
launches, host gap). --json writes every row.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gpu_profile import kernel_profile, print_profile
from step_profile import OUTSIDE, matmul_ceiling, print_parts, profile_parts
from torch import Tensor, nn

from mt.config import Config, ModelConfig, TrainConfig
from mt.config_load import load_config
from mt.data.batching import Batch, TokenBatchSampler, collate, padded_width
from mt.data.tokenizer import EOS_ID, PAD_ID
from mt.model.transformer import Transformer, sinusoidal_positions
from mt.train.compiled import StepPlan, compile_forward
from mt.train.optim import build_optimizer
from mt.train.precision import keep_compiled_kernels, pad_multiple_for
from mt.train.step import batch_loss

DEVICE = torch.device("cpu")  # --device


def sync() -> None:
    """Wait for the device (timings on a GPU must include the queued work)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """Best GFLOP/s of an n^3 matrix product in `dtype` (a 512^3 probe only, when that is very slow;
    8192^3 on a GPU)."""
    if DEVICE.type == "cuda":
        n, reps = 8192, 20
    elif n > 512:
        probe = matmul_peak(dtype, 512, 1)
        if probe < 20:  # no native support (bf16 on AVX2 runs ~1 GFLOP/s): 2048^3 would take minutes
            return probe
    a, b = torch.randn(n, n, device=DEVICE).to(dtype), torch.randn(n, n, device=DEVICE).to(dtype)
    a @ b
    best = math.inf
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


class TorchReference(nn.Module):
    """The same model built from torch.nn.Transformer, tied embeddings, the same positions."""

    def __init__(self, cfg: ModelConfig, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_positions, cfg.d_model), persistent=False)
        self.core = nn.Transformer(cfg.d_model, cfg.heads, cfg.encoder_layers, cfg.decoder_layers, cfg.d_ff,
                                   cfg.dropout, cfg.activation, batch_first=True, norm_first=cfg.norm == "pre")
        self.scale, self.p = math.sqrt(cfg.d_model), cfg.dropout

    def _emb(self, x: Tensor) -> Tensor:
        return F.dropout(self.embed(x) * self.scale + self.pe[: x.size(1)], self.p, self.training)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        T = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tgt_in.device, dtype=torch.bool)  # True = blocked
        h = self.core(self._emb(src), self._emb(tgt_in), tgt_mask=causal, src_key_padding_mask=~src_mask,
                      tgt_key_padding_mask=None, memory_key_padding_mask=~src_mask, tgt_is_causal=True)
        return F.linear(h, self.embed.weight)  # (B, T, V)


class MarianReference(nn.Module):
    """Hugging Face MarianMTModel with the config's dimensions, random init, tied embeddings.

    Marian is post-LN only; a pre-LN mt config is compared against it as it is (the same number
    of LayerNorm passes up to the final ones). Its sinusoidal positions are its own.
    """

    def __init__(self, cfg: ModelConfig, vocab: int) -> None:
        super().__init__()
        from transformers import MarianConfig, MarianMTModel

        mcfg = MarianConfig(vocab_size=vocab, decoder_vocab_size=vocab, d_model=cfg.d_model,
                            encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
                            encoder_attention_heads=cfg.heads, decoder_attention_heads=cfg.heads,
                            encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function=cfg.activation,
                            dropout=cfg.dropout, attention_dropout=cfg.attention_dropout, activation_dropout=0.0,
                            max_position_embeddings=cfg.max_positions, scale_embedding=True,
                            pad_token_id=PAD_ID, decoder_start_token_id=PAD_ID, eos_token_id=EOS_ID,
                            share_encoder_decoder_embeddings=True, tie_word_embeddings=True, use_cache=False)
        self.core = MarianMTModel(mcfg)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """The mt.model.transformer.Transformer.forward interface -> logits (B, T, V)."""
        return self.core(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt_in).logits


def mt_model(cfg: ModelConfig, vocab: int) -> Transformer:
    """mt's model, joint vocabulary (so with tied embeddings one matrix, as the peers')."""
    return Transformer(cfg, vocab, vocab, joint_vocab=True)


def params_per_token(cfg: ModelConfig, vocab: int) -> tuple[int, int]:
    """(parameters touched per source token, per target token), embeddings' lookups excluded."""
    d, f = cfg.d_model, cfg.d_ff
    enc_layer = 4 * d * d + 2 * d * f
    dec_layer = 6 * d * d + 2 * d * f  # self QKV+O, cross Q+O, FFN
    cross_kv = 2 * d * d  # applied to every source token, per decoder layer
    src_side = cfg.encoder_layers * enc_layer + cfg.decoder_layers * cross_kv
    tgt_side = cfg.decoder_layers * dec_layer + vocab * d
    return src_side, tgt_side


def load_batches(config: str, max_tokens: int, count: int, seed: int, pad_multiple: int = 1, *,
                 vocab: int = 0, lengths: str = "data", max_shapes: int = 0) -> tuple[list[Batch], float, str]:
    """`count` training batches (widths rounded up to `pad_multiple`, or to the shape grid of
    `max_shapes`, as the trainer does), the padding fraction of a whole epoch, and where they came from.
    `lengths` data: the prepared split when there is one; multi30k / wmt: synthetic lengths."""
    cfg = load_config(config)
    data_dir = cfg.run_dir / "data"
    vocab = vocab or cfg.tokenizer.vocab_size
    if lengths == "data" and (data_dir / "train.src.offsets").is_file():
        from mt.data.splits import load_split

        split = load_split(cfg.run_dir, "train")
        src_len, tgt_len = split.src.lengths(), split.tgt.lengths()

        def get(i: int) -> tuple[np.ndarray, np.ndarray]:
            return split.src[i], split.tgt[i]

        source = f"prepared data {data_dir} ({len(src_len)} pairs)"
    else:
        rng = np.random.default_rng(seed)
        n = 29000
        if lengths == "wmt":  # WMT-like: source ~25 +- 12 subwords, target a little longer
            src_len = np.clip(np.rint(rng.normal(25, 12, n)), 1, 250).astype(np.int64)
            tgt_len = np.clip(np.rint(src_len + rng.normal(2, 4, n)), 1, 250).astype(np.int64)
        else:
            src_len = np.clip(np.rint(rng.normal(13, 4, n)), 1, None).astype(np.int64)
            tgt_len = np.clip(np.rint(rng.normal(15, 5, n)), 1, None).astype(np.int64)

        def get(i: int) -> tuple[np.ndarray, np.ndarray]:
            return rng.integers(4, vocab, src_len[i]), rng.integers(4, vocab, tgt_len[i])

        source = f"synthetic {'WMT' if lengths == 'wmt' else 'Multi30k'}-like lengths ({n} pairs)"
    sampler = TokenBatchSampler(src_len, tgt_len, max_tokens=max_tokens, max_sentences=max(cfg.train.max_sentences, 2048),
                                seed=seed, pad_multiple=pad_multiple, max_shapes=max_shapes)
    epoch = sampler.epoch_batches(0)
    real = int((src_len + 1).sum() + (tgt_len + 1).sum())

    def shape(b: np.ndarray) -> tuple[int, int, int]:
        return sampler.shape_of(b) or (len(b), int(padded_width(src_len[b].max() + 1, pad_multiple)),
                                       int(padded_width(tgt_len[b].max() + 1, pad_multiple)))

    padded = sum(rows * (s + t) for rows, s, t in map(shape, epoch))
    chosen = [epoch[i] for i in range(min(count, len(epoch)))]
    batches = []
    for idx in chosen:
        pairs = [get(int(i)) for i in idx]
        batches.append(collate([p[0] for p in pairs], [p[1] for p in pairs], idx, pad_multiple,
                               sampler.shape_of(idx)).to(DEVICE))
    if max_shapes:
        source += f", {len({shape(b) for b in epoch})} batch shapes per epoch (grid of at most {max_shapes})"
    return batches, 1 - real / padded, source


def sampler_seconds(n: int = 4_500_000, max_tokens: int = 6000) -> float:
    """Seconds to build one epoch of batches for n WMT-like pairs (source ~25 +- 12 subwords)."""
    rng = np.random.default_rng(0)
    src = np.clip(rng.normal(25, 12, n), 1, 250).astype(np.int64)
    tgt = np.clip(src + rng.normal(2, 4, n), 1, 250).astype(np.int64)
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, max_sentences=512, seed=1)
    t0 = time.perf_counter()
    sampler.epoch_batches(0)
    return time.perf_counter() - t0


def train_step_fn(model: nn.Module, precision: str, train: TrainConfig | None) -> Callable[[Batch], None]:
    """One update on a batch. `train` given: mt's trainer step (its loss and optimizer); None: the
    usual recipe of a peer (F.cross_entropy with label smoothing, torch.optim.AdamW defaults)."""
    if train is None:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    else:
        opt = build_optimizer(model, train)
    params = [p for p in model.parameters() if p.requires_grad]
    ctx = bf16_autocast if precision == "bf16" else nullcontext

    def step(b: Batch) -> None:  # no host read inside: the device runs ahead (mt.train.step)
        if train is None:
            with ctx():
                logits = model(b.src, b.src_mask, b.tgt_in)
            loss = F.cross_entropy(logits.float().flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID,
                                   label_smoothing=0.1, reduction="sum") / b.num_tgt_tokens
        else:
            with ctx():
                loss = batch_loss(model, model, b, train.label_smoothing)[0] / b.num_tgt_tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)  # both the mt trainer and HF's Trainer clip at 1.0
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


@contextmanager
def bf16_autocast() -> Iterator[None]:
    """bf16 autocast on the device, with nn.Transformer's inference fast path off: its fused kernels
    (`torch._transformer_encoder_layer_fwd`) do not follow autocast and fail on bf16 inputs."""
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def forward_fn(model: nn.Module, precision: str) -> Callable[[Batch], None]:
    ctx = bf16_autocast if precision == "bf16" else nullcontext

    def run(b: Batch) -> None:
        with torch.inference_mode(), ctx():
            model(b.src, b.src_mask, b.tgt_in)

    return run


def best_times(fns: dict[str, Callable[[Batch], None]], batches: list[Batch], warmup: int,
               rounds: int) -> dict[str, float]:
    """Seconds per pass over `batches` for each fn, after `warmup` untimed steps each: the best of
    `rounds` passes, taken in turn (a, b, c, a, b, c, ...), so that a slow spell of a shared
    machine falls on every model alike instead of on whichever ran then."""
    for fn in fns.values():
        for b in batches[:warmup]:
            fn(b)
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for b in batches:
                fn(b)
            sync()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def print_rate(name: str, mode: str, seconds: float, refs: list[float], *, prec: str, tgt_tokens: int,
               flop_per_tgt: float, peak: float) -> dict:
    """Print one row of the table (rate, MFU against `peak` GFLOP/s, ratios to `refs`) -> the row."""
    rate = tgt_tokens / seconds
    mfu = rate * flop_per_tgt / (3 if mode == "forward" else 1) / (peak * 1e9)
    ratios = "".join(f"{rate / r:>9.2f}x" for r in refs)
    print(f"{name:<16}{prec:<6}{mode:<9}{rate:>10.0f}{mfu:>7.1%}{ratios}", flush=True)
    return {"model": name, "precision": prec, "mode": mode, "tgt_tok_s": round(rate, 1), "mfu": round(mfu, 4),
            "vs_peers": [round(rate / r, 3) for r in refs]}


def report_profile(step: Callable[[Batch], None], batches: list[Batch], prec: str, model_flops: float,
                   peak: float) -> None:
    """Print where mt's step goes and the MFU a step made only of its matrix products would reach."""
    parts, wall = profile_parts(step, batches)
    print(f"mt {prec} training step, per part (torch.profiler, self time, {len(batches)} steps):")
    print_parts(parts, wall, len(batches))
    c = matmul_ceiling(step, batches)
    mfu = {name: model_flops / seconds / (peak * 1e9) for name, seconds in
           (("cold", c.cold), ("hot", c.hot), ("inside", c.inside))}
    print(f"mt {prec} matrix products ({c.count}, {c.flops / 1e9:.1f} GFLOP with attention and padded rows; the "
          f"model FLOPs are {model_flops / 1e9:.1f}): inside the step {c.inside:.2f} s "
          f"({c.flops / c.inside / 1e9:.0f} GFLOP/s), alone on operands from memory {c.cold:.2f} s "
          f"({c.flops / c.cold / 1e9:.0f} GFLOP/s), alone on cached operands {c.hot:.2f} s "
          f"({c.flops / c.hot / 1e9:.0f} GFLOP/s)")
    print(f"mt {prec} MFU ceiling, a step made only of its matrix products: {mfu['inside']:.1%} at their speed "
          f"inside the step, {mfu['cold']:.1%} alone from memory, {mfu['hot']:.1%} alone from cache "
          f"({OUTSIDE.split(' (')[0]} and every other part taken to zero)")


BASE = ModelConfig(d_model=512, heads=8, encoder_layers=6, decoder_layers=6, d_ff=2048, dropout=0.1,
                  attention_dropout=0.0, norm="pre", max_positions=512)  # transformer-base (pre-LN, as mt trains it)


def mt_variants(model: Transformer, modes: list[str], max_shapes: int, backend: str) -> dict[str, nn.Module]:
    """mt's model per mode: eager; compiled as the trainer compiles it (FlexAttention key padding on
    CUDA, static shapes); compiled + CUDA graphs (CUDA only). Each variant its own copy of the weights."""
    out: dict[str, nn.Module] = {"mt": model} if "eager" in modes else {}
    for mode in ("compiled", "graphs"):
        if mode not in modes or (mode == "graphs" and DEVICE.type != "cuda"):
            continue
        twin = copy.deepcopy(model)
        twin.attention_kernel = "flex" if DEVICE.type == "cuda" and twin.cfg.attention_dropout == 0 else "sdpa"
        plan = StepPlan(compile=True, max_shapes=max(max_shapes, 8), workers=0, cuda_graphs=mode == "graphs", flex=False)
        out[f"mt {mode}"] = compile_forward(twin, plan, backend)  # the OptimizedModule passes output_layer() through
    return out


def measure(args: argparse.Namespace, cfg: Config, model_cfg: ModelConfig, vocab: int, prec: str, max_tokens: int,
            peaks: dict[str, float], peers: dict) -> list[dict]:
    """Every model and mode at one precision and batch size: the table rows (and profiles on a GPU)."""
    src_side, tgt_side = params_per_token(model_cfg, vocab)
    # The trainer's batches for this precision: bf16 on CPU pads widths (train.pad_multiple auto),
    # and then every model gets one untimed pass first, so each shape's kernels exist, as they do
    # after the first epoch of training (and every compiled shape is compiled).
    pad = pad_multiple_for(cfg.train.pad_multiple, prec, DEVICE)
    batches, pad_frac, source = load_batches(args.config, max_tokens, args.steps, cfg.train.seed, pad, vocab=vocab,
                                             lengths=args.lengths, max_shapes=args.max_shapes)
    compiled = any(m != "eager" for m in args.modes)
    warmup = max(args.warmup, len(batches)) if pad > 1 or compiled else args.warmup
    tgt_tokens = sum(b.num_tgt_tokens for b in batches)
    src_tokens = sum(int(b.src_mask[b.indices >= 0].sum()) for b in batches)
    flop_per_tgt = 6 * (tgt_side + src_side * src_tokens / tgt_tokens)
    print(f"{prec}: {source}; {len(batches)} timed batches, {tgt_tokens} target + {src_tokens} source tokens; "
          f"widths padded to a multiple of {pad}: {pad_frac:.1%} padding over an epoch at "
          f"max_tokens={max_tokens}; {warmup} untimed steps first; "
          f"training FLOPs per target token {flop_per_tgt / 1e6:.1f} M")
    print(f"{'model':<16}{'prec':<6}{'mode':<9}{'tgt tok/s':>10}{'MFU':>7}" + "".join(
        f"{'vs ' + n.split('.')[0]:>10}" for n in peers))
    models: dict[str, nn.Module] = {}
    for name, build in [*peers.items(), ("mt", mt_model)]:
        torch.manual_seed(0)
        models[name] = build(model_cfg, vocab).to(DEVICE)
    mts = mt_variants(models.pop("mt"), args.modes, args.max_shapes, args.backend)
    models.update(mts)
    steps = {name: train_step_fn(m.train(), prec, cfg.train if name.startswith("mt") else None)
             for name, m in models.items()}
    train_s = best_times(steps, batches, warmup, args.rounds)
    forward_s = best_times({name: forward_fn(m.eval(), prec) for name, m in models.items()
                            if name in peers or name == "mt"}, batches, args.warmup, args.rounds)
    for m in models.values():
        m.train()
    again = matmul_peak(torch.bfloat16 if prec == "bf16" else torch.float32)
    print(f"{prec} matmul peak read again after the models: {again:.0f} GFLOP/s; MFU below is against "
          f"{max(again, peaks[prec]):.0f}")
    peaks[prec] = max(peaks[prec], again)
    report = partial(print_rate, prec=prec, tgt_tokens=tgt_tokens, flop_per_tgt=flop_per_tgt, peak=peaks[prec])
    rows = []
    for mode, seconds in (("train", train_s), ("forward", forward_s)):
        refs = [tgt_tokens / seconds[name] for name in peers]
        for name in seconds:
            rows.append({**report(name, mode, seconds[name], refs if name.startswith("mt") else []),
                         "max_tokens": max_tokens, "peak_gflop_s": round(peaks[prec], 1)})
    if DEVICE.type == "cuda" or args.profile:
        print(f"kernel profile per step ({prec}, max_tokens {max_tokens}):")
        for name, step in steps.items():
            profile = kernel_profile(step, batches, DEVICE)
            print_profile(name, profile)
            next(r for r in rows if r["model"] == name and r["mode"] == "train")["profile"] = profile
    if args.profile and DEVICE.type == "cpu" and "mt" in steps:
        report_profile(steps["mt"], batches, prec, tgt_tokens * flop_per_tgt, peaks[prec])
    return rows


def main() -> None:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/multi30k_en_de.yaml")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--size", default="config", choices=["config", "base"],
                    help="the config's model, or transformer-base with a 32,000 vocabulary (synthetic batches)")
    ap.add_argument("--lengths", default="data", choices=["data", "multi30k", "wmt"],
                    help="sentence lengths: the prepared split when there is one, or synthetic ones")
    ap.add_argument("--max-tokens", type=int, nargs="+", help="batch sizes in padded tokens (default: the config's)")
    ap.add_argument("--max-shapes", type=int, default=0, help="the trainer's shape grid (train.max_shapes); 0 = off")
    ap.add_argument("--modes", nargs="+", default=["eager"], choices=["eager", "compiled", "graphs"],
                    help="mt's step eager, compiled (as the trainer compiles it), compiled + CUDA graphs")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager: no build, for tests)")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps (batches) per measurement")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps before each measurement (a whole pass where batches are padded or compiled)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="timed passes per model, the models taking turns; the best pass counts")
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--no-reference", action="store_true", help="skip the nn.Transformer and Marian baselines")
    ap.add_argument("--profile", action="store_true",
                    help="where mt's training step goes (per part) and the ceiling its matrix products set")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = default)")
    ap.add_argument("--force", action="store_true",
                    help="time every --precision even where it has no native support (slow; for tests)")
    ap.add_argument("--json", type=Path, help="write every row (and the GPU profiles) here")
    ap.add_argument("--no-sampler", action="store_true", help="skip timing the batch sampler on 4.5M pairs")
    args = ap.parse_args()
    DEVICE = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_compiled_kernels()  # as the trainer does, before any bf16 work
    cfg = load_config(args.config)
    model_cfg, vocab = (cfg.model, cfg.tokenizer.vocab_size) if args.size == "config" else (BASE, 32000)
    if args.size == "base" and args.lengths == "data":
        args.lengths = "wmt"
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    device_name = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu"
    sampler = "" if args.no_sampler else f"; sampler: one epoch of batches for 4.5M pairs built in {sampler_seconds():.1f} s"
    print(f"device {device_name}{sampler}")
    print(f"matmul peak: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; threads {torch.get_num_threads()}")
    peers: dict[str, Callable[[ModelConfig, int], nn.Module]] = {}
    if not args.no_reference:
        peers["nn.Transformer"] = TorchReference
        if importlib.util.find_spec("transformers") is not None:
            peers["Marian"] = MarianReference
        else:
            print("Marian: skipped, transformers is not installed (pip install -e '.[bench]')")
    rows: list[dict] = []
    for prec in args.precision:
        if peaks[prec] < peaks["fp32"] / 4 and not args.force:
            print(f"{prec}: skipped, its matmuls run at {peaks[prec]:.1f} GFLOP/s here (no native support)")
            continue
        for max_tokens in args.max_tokens or [cfg.train.max_tokens]:
            rows += measure(args, cfg, model_cfg, vocab, prec, max_tokens, peaks, peers)
    train_rates = {r["precision"]: r["tgt_tok_s"] for r in rows if r["model"] == "mt" and r["mode"] == "train"}
    if len(train_rates) == 2:
        print(f"mt training step bf16 / fp32: {train_rates['bf16'] / train_rates['fp32']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"device": device_name, "size": args.size, "lengths": args.lengths,
                                         "peaks_gflop_s": peaks, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
