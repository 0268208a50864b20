"""The training recipe for a corpus and a budget: every key a user would otherwise guess, chosen
from the corpus (`mt.data.survey.CorpusSurvey`) and the machine (`Machine`, measured as
`train.precision: auto` measures it), each with a one-line reason (`choose`);
`mt.train.recipe_yaml.recipe_yaml` writes the choice as an ordinary config that `mt train CONFIG`
reproduces.

The rule, and where each part comes from (L = literature, M = measured here, J = judgement):

- **Vocabulary** (L, M): unigram sentencepiece, joint when both sides are written in one script
  (three-way tying), separate otherwise. Half as many pieces as the corpus has distinct words
  (both sides of a joint model), at most 8k up to 1M pairs, then growing to 32k at 4.5M (L: Gowda
  & May 2020: ~8k at 1M pairs, 32k-64k at 4.5M), and at most what keeps the output layer within
  half the rung's matrix parameters (`output_cap`: 5k at d 128, 8k at d 192, 14k at d 256): past
  that the softmax eats the budget. M: in the key grid (en→de, d 128, 1,500 updates, Zen 4), at
  3k pairs (10,366 distinct words) 5k pieces beat 2.5k by 1.3 test BLEU (21.77 vs 20.50) and 1k
  by 5.2, and sentencepiece refused 7.5k; at 1k pairs 3k beat 1.5k by 0.6, at 10k 9k beat 4.5k by
  0.5 (both within the noise; validation preferred the smaller) but took 22% longer, and in
  4 minutes at 10k pairs 8k pieces scored 24.17, 4.5k 25.14 (the session before) and 5k 26.42
  (exp_recipe, each beside its own demo-config run: +2.75, +4.07, +3.84); at 29k pairs 5k and 8k
  were level in the demo sweep (docs/sweep.md). Monotone in the corpus size as long as its
  distinct words grow with it.
- **Model size** (L, M, J): the smaller of two caps, both monotone. The data cap (L: Araabi & Monz:
  smaller FFN and fewer heads on small data; scaling laws, Gordon, Duh & Kaplan 2021 and Ghorbani et
  al. 2021: past some size extra parameters stop paying for a given corpus): rung 0 (d 128) under 5k
  pairs, rung 1 (d 192, the demo) under 50k, rung 2 (d 256, 4+4) under 300k, rung 3 (Transformer
  base) under 3M, rung 4 (big) above. The compute cap (M): the largest rung that sees at least
  `TOKENS_PER_PARAM` (1.0) target tokens per non-embedding parameter in the budget at the machine's
  estimated rate. Measured on both sides of it: in the key grid
  (scripts/experiments/exp_recipe_grid.py, en→de, the updates a 4-minute budget buys one thread of a
  2-core Zen 4) d 128 beat d 192 by 4.7 test BLEU at 10k pairs (26.96 vs 22.29; ~1.3 vs ~0.4 tokens
  per parameter by this estimate), and at 29k pairs and 20 minutes d 192 (~2-3 per parameter) beat d
  256 and d 384 (~0.4-1) in the demo sweep. The machine's rate is the training step itself, timed
  (`_StepTimer`: the demo-size model's forward, fused loss, backward and AdamW step in the precision
  auto picks; the median of `MEASURE_ROUNDS` interleaved rounds, since a shared machine's speed
  swings from second to second; scaled by `STEP_SUSTAINED` to what whole runs sustain), not a matrix
  product scaled by an assumed efficiency; and a rung is climbed only when the budget clears the cap
  by `RUNG_MARGIN` (15%), so timing noise near the boundary keeps the smaller model (J, issue 54: a
  Zen 3 read 83 and 101 GFLOP/s a minute apart and chose d 128, then d 192). The reason line names
  the rung it nearly chose and the figure it measured. On a slow machine the smaller rung pays (M:
  29k pairs, 20 minutes, one fp32 thread of an Intel Xeon without BF16, 63 GFLOP/s: d 192 would see
  0.86 per parameter, so d 128 was chosen and scored 36.27 test BLEU against the demo config's
  34.59, p = 0.002; on its two threads, 77 GFLOP/s, d 128 again: 37.23 / 29.05 / 23.82 on the three
  test sets against d 192's 37.00 / 27.94 / 23.52 the session before).
- **Regularisation** (M, L): dropout by the epochs the budget buys (tokens seen / corpus
  tokens, by this module's estimate): 0.3 from 80 epochs, 0.2 from 25, else 0.1. The key grid's
  best at 1k pairs (~125-175 estimated epochs) was 0.3, at 3k (~50) 0.2, at 10k (~12) 0.1, and
  the demo sweep's at 29k (~12 epochs) 0.1 (L: Araabi & Monz's 0.3 for small data). Attention
  dropout 0.1 from 15 epochs. Label smoothing 0.1 at every size (M: in the grid, 0.2 and 0.3
  were within the noise of 0.1 at 1k and 10k pairs (±0.4) and lost 5.2 test BLEU at 3k, where
  greedy validation hid the loss that beam 5 showed; Araabi & Monz's 0.4-0.6 at small
  sizes did not carry over to mt's beam search). Layer-drop and target word dropout (also
  theirs) are not in mt yet.
- **Batches and schedule** (M, L): 2,000-token batches on a CPU at rungs 0-1 (M: the demo sweep),
  at most a tenth of an epoch so a small corpus still gets ten updates per epoch; 4,096 at rung 2,
  8,192 above (L: Vaswani et al.'s ~25k per update at base size, which a GPU reaches with
  `train.accumulate`). lr decays linearly to 0 over the budget after a 6% warmup (M: +1.8 val
  BLEU over inverse_sqrt in the demo sweep), peak 2e-3 up to d 256 (M), 1e-3 at base, 5e-4 at
  big (L: the usual peaks at those widths).
- **Validation and checkpoints** (J, M): validate every 25% of a run under 30 minutes, every 10%
  of a longer one, on at most 300 sentences (greedy: each validation of an early model decodes
  to the length limit, and took a third of a 40-second run), a periodic checkpoint every 3%, the
  last 5 averaged into averaged.pt when that validates better (M: the demo keeps it only then).

Measured against the demo config with its data swapped (scripts/experiments/exp_recipe.py, same budget, one
thread each, two trainings side by side on a quiet 2-core AMD EPYC Zen 4, test_2016_flickr, beam
5, paired bootstrap; the rule fitted on the en→de grid above, en→fr and de→en held out): at 4
minutes, 1k pairs +7.52 en→fr, +3.33 de→en, +3.84 en→de; 3k +5.83, +3.18, +3.77; 10k +8.46, +4.87,
+3.84 (each p = 0.001); en→de 3k with further seeds: +2.41 with seed 2 (18.30 → 20.71) and +2.95
with seed 3 (17.34 → 20.28), each p = 0.001: a mean of +3.04 over three seeds, the 3-BLEU target
met by one of them; at 29k pairs and 20 minutes (en→de) −0.27 (p = 0.20; the rule chose the demo's
model). Not measured: budgets over 20 minutes, the 4.5M-pair corpus, GPUs' own budgets, CPUs other
than the Zen 4. The tables: docs/guides/own-corpus.md; per-run data: docs/data/recipe_grid.json
(exp_recipe.py) and docs/data/recipe_key_grid.jsonl (the key grid).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from mt.config import ModelConfig
from mt.data.batching import collate
from mt.data.survey import CorpusSurvey
from mt.data.tokenizer import PAD_ID
from mt.device import bf16_feature, cpu_name
from mt.model.transformer import Transformer
from mt.train.precision import MIN_MATMUL_SPEEDUP, matmul_speedup
from mt.train.recipe_vocab import choose_vocab, length_ratio, width_normalisation
from mt.train.step import autocast, batch_loss

TOKENS_PER_PARAM = 1.0  # target tokens seen per non-embedding parameter, at least (compute cap; measured)
# A rung is climbed only when the budget clears TOKENS_PER_PARAM by this much: near the boundary the
# smaller (safer) model is kept, so that a few percent of timing noise does not change the model
# (issue 54: on a Zen 3, 83 and 101 GFLOP/s a minute apart chose d_model 128 and 192).
RUNG_MARGIN = 0.15
# Achieved training FLOP/s over the timed fp32 1024^3 product: the demo model's ~4,900 target tok/s in
# fp32 on a 2-core Zen 4 (docs/performance.md) against ~167 GFLOP/s products, by the estimate below.
EFFICIENCY = 0.8
# The readings of a shared (virtual) machine swing by a third from one second to the next (a 2-core
# Intel Xeon, quiet: training steps of 63 to 105 GFLOP/s over 40 s; one dry run read 112, the demo run
# a minute later 77): `measure_machine` takes the median of MEASURE_ROUNDS rounds of 3 steps and 3
# products, interleaved over a few seconds, not of one burst.
MEASURE_ROUNDS = 4
PRODUCT_N = 1024  # the timed fp32 product's size
# A whole run trains slower than its timed step (validation, checkpoints, batches of every length,
# the smaller rungs' lower efficiency): measured over three 20-minute runs on that Xeon, 0.77-0.86
# (the demo config on one thread 0.84, d_model 128 on one 0.77, on two 0.86); on a Zen 4 in bf16
# (d_model 192, two threads) 0.81 and 0.88 over two 20-minute runs, 0.67 over a 1-hour one whose
# reading caught a fast spell (188 against 162 and 147). TOKENS_PER_PARAM was fitted against what
# runs really trained, so the timed step is scaled to that.
STEP_SUSTAINED = 0.82
BF16_STEP_GAIN = 1.27  # a bf16 training step over fp32 where auto picks bf16 (Zen 4, docs/performance.md)
# the output layer's parameters (d_model x vocabulary) over the rung's matrix parameters, at most
OUTPUT_SHARE = 0.5
CAP_VOCAB = 8000  # the output layer's size in the compute cap, whatever the corpus's vocabulary
WORDS_TO_PIECES = 1.3  # subword pieces per word at these vocabulary sizes (Multi30k: ~1.3 at 8k)


@dataclass(frozen=True)
class Rung:
    """One model size of the ladder the rule climbs."""

    d_model: int
    heads: int
    layers: int  # encoder and decoder each
    d_ff: int
    max_pairs: int  # the data cap: this rung only for corpora under this many pairs (next rung above)

    def matrix_params(self) -> int:
        """Non-embedding matrix parameters (encoder: 4d² + 2d·ff a layer; decoder: 8d² + 2d·ff)."""
        d, f = self.d_model, self.d_ff
        return self.layers * (4 * d * d + 2 * d * f) + self.layers * (8 * d * d + 2 * d * f)


LADDER = (
    Rung(128, 2, 3, 512, 5_000),
    Rung(192, 4, 3, 768, 50_000),  # the demo's model (configs/multi30k_en_de.yaml)
    Rung(256, 4, 4, 1024, 300_000),
    Rung(512, 8, 6, 2048, 3_000_000),  # Transformer base
    Rung(1024, 16, 6, 4096, 0),  # Transformer big
)


@dataclass(frozen=True)
class Machine:
    """What training will run on, measured: the device, its fp32 rate and the precision auto picks."""

    device: str  # "cpu" or "cuda"
    name: str
    gflops: float  # fp32 1024^3 matrix products, median of readings (CPU); a nominal figure for CUDA
    precision: str  # what train.precision auto would choose: bf16 | fp32
    # the training step timed (`_StepTimer`, the recipe's FLOP count); 0 = not measured
    step_gflops: float = 0.0

    @property
    def flops(self) -> float:
        """Training FLOP/s of the model estimate `Rung.matrix_params` (achieved, not peak): the
        measured step's when there is one, else estimated from the matrix products."""
        if self.step_gflops:
            return self.step_gflops * 1e9 * STEP_SUSTAINED
        gain = BF16_STEP_GAIN if self.precision == "bf16" else 1.0
        return self.gflops * 1e9 * EFFICIENCY * gain

    def describe(self) -> str:
        step = (f"training step {self.step_gflops:.0f} GFLOP/s (~{self.flops / 1e9:.0f} sustained), "
                if self.step_gflops else "")
        return f"{self.name}, {step}{self.gflops:.0f} GFLOP/s fp32 products, {self.precision}"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _product_seconds(a: torch.Tensor, b: torch.Tensor, readings: int, reps: int = 3) -> list[float]:
    """`readings` timings of the product a @ b, each the best of `reps` (one-sided noise per reading)."""
    seconds = []
    for _ in range(readings):
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        seconds.append(best)
    return seconds


def _product_gflops(seconds: list[float]) -> float:
    """fp32 PRODUCT_N^3 products' rate from their timings: the median (a slow spell ignored by it)."""
    return 2 * PRODUCT_N**3 / _median(seconds) / 1e9


class _StepTimer:
    """The training step that will really run: forward, the fused loss and backward of the rung's
    model on a Multi30k-shaped batch (64 pairs of 14 / 16 pieces) in `precision`, plus an AdamW
    step, after two warm-up steps. `gflops` converts timings to the recipe's FLOP count (6 x
    (matrix parameters + output layer) per target token, `_tokens_seen`)."""

    def __init__(self, precision: str, rung: int = 1, vocab: int = CAP_VOCAB) -> None:
        r = LADDER[rung]
        cfg = ModelConfig(d_model=r.d_model, heads=r.heads, encoder_layers=r.layers, decoder_layers=r.layers,
                          d_ff=r.d_ff, norm="pre")
        self.precision = precision
        self.model = Transformer(cfg, vocab, vocab, joint_vocab=True).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(0)
        self.batch = collate(torch.randint(4, vocab, (64, 14), generator=gen).tolist(),
                             torch.randint(4, vocab, (64, 16), generator=gen).tolist(), list(range(64)))
        tgt_tokens = float((self.batch.tgt_out != PAD_ID).sum())
        self.flops = 6.0 * (r.matrix_params() + r.d_model * vocab) * tgt_tokens
        self.seconds(2)

    def seconds(self, steps: int) -> list[float]:
        """The wall time of each of `steps` training steps."""
        out = []
        for _ in range(steps):
            t0 = time.perf_counter()
            with autocast(self.precision, torch.device("cpu")):
                loss, _, _ = batch_loss(self.model, self.model, self.batch, 0.1)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            out.append(time.perf_counter() - t0)
        return out

    def gflops(self, seconds: list[float]) -> float:
        return self.flops / _median(seconds) / 1e9


def measure_machine(threads: int = 0, precision: str = "auto") -> Machine:
    """Time this machine's training step in the precision training will use (`train.precision`:
    auto's choice, or fp32 / bf16 when set) on `threads` threads as training will (0: torch's
    default); a CUDA GPU: nominal, not timed."""
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        name = torch.cuda.get_device_name(0)
        return Machine("cuda", name, 50_000.0, "bf16" if bf16_feature(dev) else "fp32")
    before = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        if precision not in ("fp32", "bf16"):  # auto (fp16 is CUDA's): what the trainer's check will pick
            feature = bf16_feature(torch.device("cpu"))
            precision = "bf16" if feature is not None and matmul_speedup() >= MIN_MATMUL_SPEEDUP else "fp32"
        a, b = torch.randn(PRODUCT_N, PRODUCT_N), torch.randn(PRODUCT_N, PRODUCT_N)
        torch.mm(a, b)
        timer = _StepTimer(precision)
        products: list[float] = []
        steps: list[float] = []
        for _ in range(MEASURE_ROUNDS):  # interleaved, so one slow spell of the machine is outvoted
            products += _product_seconds(a, b, 3)
            steps += timer.seconds(3)
        return Machine("cpu", f"{cpu_name()}, {torch.get_num_threads()} thread(s)", _product_gflops(products),
                       precision, step_gflops=timer.gflops(steps))
    finally:
        torch.set_num_threads(before)


@dataclass
class Recipe:
    """The chosen config (sections of keys) and a one-line reason per chosen key."""

    config: dict[str, Any]
    reasons: dict[str, str] = field(default_factory=dict)  # "section.key" -> reason
    headline: str = ""

    def set(self, section: str, key: str, value: Any, reason: str) -> None:
        self.config.setdefault(section, {})[key] = value
        self.reasons[f"{section}.{key}"] = reason


def corpus_vocab(pairs: int, types: int) -> int:
    """Pieces the corpus asks for, `pairs` with `types` distinct words (both sides of a joint
    model): half the distinct words, at most 8k up to 1M pairs and growing to 32k at 4.5M, in
    steps of 500, at least 1,000."""
    size = 8000.0 if pairs <= 1_000_000 else 8000 * (pairs / 1_000_000) ** 0.92
    return max(1000, int(round(min(size, 32_000, types / 2) / 500)) * 500)


def output_cap(rung: Rung) -> int:
    """The most pieces whose output layer (d_model x pieces) is within `OUTPUT_SHARE` of the
    rung's matrix parameters, in steps of 500: 5,000 at d 128, 8,000 at d 192."""
    return int(OUTPUT_SHARE * rung.matrix_params() / rung.d_model) // 500 * 500


def _rung(s: CorpusSurvey, budget_s: float, machine: Machine) -> tuple[int, int]:
    """(the rung, the data cap's rung)."""
    data_cap = next((i for i, r in enumerate(LADDER) if r.max_pairs and s.pairs < r.max_pairs),
                    len(LADDER) - 1)
    chosen = 0
    for i in range(data_cap + 1):  # at a fixed vocabulary: the cap must not fall as the corpus grows
        if _per_param(i, budget_s, machine) >= TOKENS_PER_PARAM * (1 + RUNG_MARGIN):
            chosen = i
    return chosen, data_cap


def _per_param(rung: int, budget_s: float, machine: Machine) -> float:
    """Target tokens the budget buys per non-embedding parameter of `rung` (at the cap's vocabulary)."""
    return _tokens_seen(LADDER[rung], CAP_VOCAB, budget_s, machine) / LADDER[rung].matrix_params()


def _tokens_seen(r: Rung, vocab: int, budget_s: float, machine: Machine) -> float:
    flops_per_tgt_token = 6.0 * (r.matrix_params() + r.d_model * vocab)  # source tokens ride along
    return budget_s * machine.flops / flops_per_tgt_token


def choose(s: CorpusSurvey, budget_s: float, machine: Machine) -> Recipe:
    """The recipe for the corpus `s` in `budget_s` seconds of training on `machine`."""
    recipe = Recipe({})
    n = f"{s.pairs:,} pairs"
    rung_i, cap_i = _rung(s, budget_s, machine)
    rung = LADDER[rung_i]
    vocab = _tokenizer(recipe, s, rung)
    tgt_tokens = _tokens_seen(rung, vocab, budget_s, machine)
    tgt_per_epoch = max(1.0, s.tgt_words * WORDS_TO_PIECES)
    epochs = tgt_tokens / tgt_per_epoch
    up = rung_i + 1  # the rung it did not choose: how near it came
    near = (f"; rung {up} (d_model {LADDER[up].d_model}) would see "
            f"{_per_param(up, budget_s, machine):.2f} per parameter at {machine.flops / 1e9:.0f} GFLOP/s, "
            f"under the {TOKENS_PER_PARAM * (1 + RUNG_MARGIN):.2f} it needs"
            if up <= cap_i else "")
    why = (f"{n} allow rung {cap_i}; the budget buys ~{tgt_tokens / 1e6:.1f}M target tokens, "
           f"{tgt_tokens / rung.matrix_params():.2f} per parameter{near}" if rung_i < cap_i
           else f"{n}: rung {rung_i} of {len(LADDER) - 1} (smaller models for less data, Araabi & Monz 2020)")
    recipe.set("model", "d_model", rung.d_model, why)
    recipe.set("model", "heads", rung.heads,
               f"d_model {rung.d_model}: {rung.d_model // rung.heads} per head; "
               "fewer heads on small data (Araabi & Monz 2020)")
    recipe.set("model", "encoder_layers", rung.layers, f"rung {rung_i}")
    recipe.set("model", "decoder_layers", rung.layers, f"rung {rung_i}")
    recipe.set("model", "d_ff", rung.d_ff, "4 x d_model; a small FFN for small data (Araabi & Monz 2020)")
    recipe.set("model", "norm", "pre", "pre-LN trains stably at the high peak lr below")
    dropout = 0.3 if epochs >= 80 else 0.2 if epochs >= 25 else 0.1
    if dropout == 0.3:
        dropout_why = ("many passes over little data, dropout 0.3 "
                       "(best at 1k pairs in the grid; Araabi & Monz 2020)")
    elif dropout == 0.2:
        dropout_why = "dropout 0.2 (best at 3k pairs in the grid)"
    else:
        dropout_why = "few epochs, dropout 0.1 (best at 10k pairs in the grid and at 29k in the demo sweep)"
    recipe.set("model", "dropout", dropout, f"~{epochs:.0f} epochs in the budget: " + dropout_why)
    recipe.set("model", "attention_dropout", 0.1 if epochs >= 15 else 0.0, f"~{epochs:.0f} epochs")
    recipe.set("train", "label_smoothing", 0.1, "0.1 at every size: in the grid (1k-10k pairs) 0.2 and 0.3 "
               "never beat it by more than the noise and lost 5 test BLEU at 3k pairs")
    _schedule(recipe, s, rung_i, rung, tgt_per_epoch, budget_s)
    recipe.headline = (f"{s.describe()}; budget {_duration(budget_s)} on {machine.describe()}: "
                       f"~{tgt_tokens / 1e6:.1f}M target tokens, ~{epochs:.0f} epochs of rung {rung_i} "
                       f"(d_model {rung.d_model}, {rung.layers}+{rung.layers} layers)")
    return recipe


def _tokenizer(recipe: Recipe, s: CorpusSurvey, rung: Rung) -> int:
    """The tokenizer keys, each side read as its script requires (`mt.train.recipe_vocab`); returns
    the joint or target vocabulary's size."""

    def wanted(units: int) -> tuple[int, str]:
        full = corpus_vocab(s.pairs, units)
        size = min(full, output_cap(rung))
        capped = (f"; at most {size:,} at d_model {rung.d_model}, whose output layer it keeps within half "
                  "the matrix parameters" if size < full else "")
        return size, ("half as many pieces, at most 8k up to 1M pairs (measured; Gowda & May 2020)"
                      + capped + (", at its floor" if size <= 1000 else ""))

    main, src = choose_vocab(s, wanted)
    recipe.set("tokenizer", "type", "unigram", "unigram sentencepiece (Kudo 2018), mt's default")
    recipe.set("tokenizer", "vocab_size", main.size, main.reason)
    recipe.set("tokenizer", "character_coverage", main.coverage, main.coverage_reason)
    scripts = f"{s.src_script or '?'} and {s.tgt_script or '?'}"
    recipe.set("tokenizer", "joint", src is None, f"{scripts}: " + (
        "one script, one shared vocabulary and tied embeddings" if s.shared_script else
        "Han characters shared, one vocabulary and tied embeddings" if src is None else
        "two scripts, a vocabulary each"))
    if src is not None:
        recipe.set("tokenizer", "src_vocab_size", src.size, src.reason)
        recipe.set("tokenizer", "src_character_coverage", src.coverage, src.coverage_reason)
    recipe.set("tokenizer", "hard_vocab_limit", False, "the sizes above are the most pieces: "
               "a corpus too small for them gets fewer instead of an error")
    recipe.set("tokenizer", "byte_fallback", True, "a character the tokenizer never saw is spelled in "
               "UTF-8 byte pieces, not <unk>, so it comes back as itself")
    normalization, why = width_normalisation(s)
    recipe.set("tokenizer", "normalization", normalization, why)
    ratio, why = length_ratio(s)
    recipe.set("data", "max_len_ratio", ratio, why)
    return main.size


def _schedule(recipe: Recipe, s: CorpusSurvey, rung_i: int, rung: Rung, tgt_per_epoch: float,
              budget_s: float) -> None:
    """Batch size, learning rate, schedule, validation and checkpoints."""
    base = 2000 if rung_i <= 1 else 4096 if rung_i == 2 else 8192
    epoch_tokens = 2 * tgt_per_epoch  # padded source + target tokens
    max_tokens = int(max(500, min(base, epoch_tokens / 10)) // 100 * 100)
    recipe.set("train", "max_tokens", max_tokens, f"{base:,}-token batches at this size (measured at rung 1)"
               + (", cut so an epoch has ~10 updates" if max_tokens < base else ""))
    lr = 2e-3 if rung.d_model <= 256 else 1e-3 if rung.d_model <= 512 else 5e-4
    recipe.set("train", "schedule", "linear_decay",
               "linear decay to 0 over the budget (+1.8 val BLEU, demo sweep)")
    measured = " (measured at d_model 192)" if rung.d_model <= 256 else ""
    recipe.set("train", "lr", lr, f"peak for d_model {rung.d_model}" + measured)
    recipe.set("train", "warmup", "6%", "the demo's 400 of ~6,500 updates")
    recipe.set("train", "time_budget", _duration(budget_s), "--budget")
    short = budget_s < 1800
    recipe.set("train", "valid_every", "25%" if short else "10%",
               "four validations in a short run (each one decodes), ten in a longer one")
    recipe.set("train", "valid_epoch_end", False, "validate on that cadence only: a small corpus ends "
               "an epoch every few updates")
    recipe.set("train", "valid_max_sentences", 300,
               "greedy BLEU on at most 300 sentences keeps validation cheap")
    recipe.set("train", "save_every", "3%", "periodic checkpoints for averaging")
    recipe.set("train", "keep_checkpoints", 5, "the last 5 periodic checkpoints")
    recipe.set("train", "average_last", 5, "averaged.pt of the last 5, kept only when it validates better")
    recipe.set("train", "log_every", 25, "a training-loss record every 25 updates (the outlook reads them)")
    recipe.set("train", "fit_alpha", True, "after training, the length penalty's alpha chosen by beam BLEU "
               "on up to 1,500 val sentences and stored in the checkpoint "
               "(a short run's model is short-spoken)")
    recipe.set("train", "fit_confidence", True, "after training, the sentence confidence calibrated "
               "against sentence chrF on the same val sentences (one more beam decode of them) "
               "and stored in the checkpoint")
    recipe.set("decode", "search", {"beam": 5}, "beam 5, alpha 0.6 to start from (mt's evaluation default)")


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"

