"""Translation speed: mt greedy and beam search, with and without the decoder cache, the same
model exported to CTranslate2 (fp32 and int8), and HF transformers' `generate` on a MarianMTModel
of the same dimensions, in one run.

    .venv/bin/python scripts/bench/bench_translate.py --limit 100
    .venv/bin/python scripts/bench/bench_translate.py --checkpoint runs/multi30k_en_de/checkpoints/best.pt
    .venv/bin/python scripts/bench/bench_translate.py -c runs/x/checkpoints/best.pt -c runs/x/checkpoints/averaged.pt

Input: the source side of `--split` (default test_2016_flickr) of the config's corpus
(`--data` overrides data.path). Model: the checkpoint's when `--checkpoint` is given (natural
output lengths, its decode settings); otherwise a random-weight model of the config's size
(the model size of configs/multi30k_en_de.yaml) whose
EOS logit is zeroed so that every sentence gets exactly `--out-len` tokens plus a forced EOS —
random weights would otherwise stop at arbitrary lengths. The tokenizer is the run directory's
`spm.model` when prepared, else one trained here on the first 20k training pairs.

Every implementation decodes the same length-sorted batches (mt.data.batching.decode_batches with
the config's decode.resources.max_tokens, divided by the beam). Measured:
- mt, cached: mt.decode.search.greedy_search / beam_search (incremental decoding with DecoderCache);
- mt, uncached: the same search functions over a wrapper whose decode_step re-runs
  `model.decode` over the whole prefix every step (the baseline the cache is measured against;
  outputs are checked to be identical);
- HF: `MarianMTModel.generate` (random weights, `min_new_tokens = max_new_tokens = out_len + 1`
  so it runs the same number of decoder steps; beam search with the same beam) — only in
  random-model mode, where output lengths can be made equal;
- mt bf16: the same search over a bf16 copy of the model (`--precision bf16`), only on CPUs with
  native bf16 (AVX512-BF16/AMX) unless --bf16 is forced;
- CTranslate2 fp32 / int8: the (first) model exported by `mt export` (into a temporary folder) and
  run by `mt.deploy.ct2.CT2Translator` with mt's decode settings, twice (`--no-ct2` skips them):
  on mt's batches, each one CTranslate2 batch (what `mt translate -c DIR` does), and over the whole
  input in one call with `max_batch_size=--ct2-batch-tokens` (4096) and `batch_type="tokens"`, the
  settings CTranslate2's documentation advises for a file;
- mt end to end: `mt.decode.translate.translate_lines` (tokenise, batch, search, detokenise) on
  the same sentences and batches, timed in `--e2e-rounds` rounds alternating with the cached
  search alone; the summary gives the ratio of their best times (1.0 = nothing outside the model);
- mt ensemble (with several `-c`, or `--ensemble M` random models): `mt.model.ensemble.Ensemble` of
  the M models in the same searches, reported as its speed relative to the first model alone
  (ideally about 1/M: every member runs its own encoder and decoder steps).

With a checkpoint every row also shows BLEU (sacreBLEU against the split's references; the int8
export should stay within 0.5 BLEU of native fp32); with random weights BLEU is meaningless ("-").

sent/s counts source sentences; target tokens/s counts the output's tokens plus EOS (decoder
steps of the 1-best, not of every beam row). Model GFLOP/s estimates useful work (2 x weights
touched per token + attention; the beam's K rows each count) and MFU divides it by `--peak-gflops`
(about 190 fp32 GFLOP/s on the 2-core reference machines, see DESIGN.md).
"""

from __future__ import annotations

import copy
import dataclasses
import platform
import shutil
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
import typer

from mt.config import Config, DecodeConfig
from mt.config_load import load_config
from mt.data.batching import collate_source, decode_batches
from mt.data.corpus import read_split
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_sentencepiece
from mt.decode.beam import beam_search
from mt.decode.rules import search_settings
from mt.decode.search import greedy_search
from mt.decode.translate import translate_lines
from mt.device import bf16_feature
from mt.eval.evaluate import score
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer

Batches = list[tuple[torch.Tensor, torch.Tensor]]


class PrefixCache:
    """Uncached baseline's state: just the tokens fed so far (R, t)."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens

    def reorder(self, index: torch.Tensor) -> PrefixCache:
        return PrefixCache(self.tokens.index_select(0, index))

    def reorder_beams(self, index: torch.Tensor) -> PrefixCache:
        return self.reorder(index)


class UncachedDecoder:
    """The search interface over a Transformer, re-decoding the whole prefix at every step."""

    def __init__(self, model: Transformer) -> None:
        self.model = model

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.model.encode(src, src_mask)

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
                    cache: PrefixCache | None) -> tuple[torch.Tensor, PrefixCache]:
        prefix = tokens if cache is None else torch.cat([cache.tokens, tokens], dim=1)  # (R, t+1)
        logits = self.model.decode(prefix, memory, src_mask)[:, -1]  # (R, V): the whole prefix again
        return logits.float().log_softmax(dim=-1), PrefixCache(prefix)


def decode_flops(model: Transformer, src_len: int, tgt_len: int, rows: int) -> float:
    """Useful FLOPs of translating one sentence: encoder over src_len tokens, `rows` decoder
    rows (the beam) over tgt_len steps each; 2 FLOPs per multiply-add."""
    c = model.cfg
    d, f, v = c.d_model, c.d_ff, model.tgt_embed.num_embeddings
    enc = src_len * c.encoder_layers * 2 * (4 * d * d + 2 * d * f + 2 * d * src_len)
    cross_kv = src_len * c.decoder_layers * 2 * 2 * d * d
    per_step = c.decoder_layers * 2 * (6 * d * d + 2 * d * f) + 2 * d * v
    attn = c.decoder_layers * 2 * 2 * d * (tgt_len * (tgt_len + 1) / 2 + tgt_len * src_len)
    return enc + cross_kv + rows * (tgt_len * per_step + attn)


def make_batches(ids: list[list[int]], max_tokens: int) -> tuple[list[np.ndarray], Batches]:
    lengths = np.array([len(s) for s in ids], dtype=np.int64)
    order = decode_batches(lengths, max_tokens=max_tokens, max_sentences=max_tokens)
    return order, [collate_source([ids[i] for i in rows]) for rows in order]


def timed(fn: Callable[[], list[list[int]]]) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    with torch.inference_mode():
        out = fn()
    return time.perf_counter() - start, out


def run_mt(model: object, batches: Batches, decode: DecodeConfig, beam: int) -> list[list[int]]:
    out: list[list[int]] = []
    settings = search_settings(dataclasses.replace(decode.search, beam=beam))
    for src, mask in batches:
        if beam == 1:
            out += greedy_search(model, src, mask, settings)
        else:
            out += [h[0].tokens for h in beam_search(model, src, mask, settings)]
    return out


def run_ct2(translator: object, id_batches: list[list[list[int]]], decode: DecodeConfig, beam: int) -> list[list[int]]:
    """CTranslate2 over the same batches as mt (ids without EOS), mt's decode settings."""
    out: list[list[int]] = []
    settings = search_settings(dataclasses.replace(decode.search, beam=beam))
    for batch in id_batches:
        out += [hyps[0][0] for hyps in translator.translate_ids(batch, settings)]
    return out


def export_all(cfg: Config, tokenizer: Tokenizer, model: Transformer, workdir: Path,
               own_batch_tokens: int) -> dict[str, tuple[object, object]]:
    """The model exported to CTranslate2 fp32 and int8 (via a temporary checkpoint) -> for each, a
    translator as `mt translate -c DIR` runs it (mt's batches, each one CTranslate2 batch) and one
    as its documentation advises running a whole file (`max_batch_size=own_batch_tokens`,
    `batch_type="tokens"`: CTranslate2 sorts and batches by itself)."""
    from mt.deploy.ct2 import CT2Translator
    from mt.deploy.export import export_ctranslate2

    ckpt = workdir / "bench.pt"
    save_checkpoint(ckpt, inference_state(cfg, tokenizer, model, update=0, epoch=0))
    out = {}
    for q in ("none", "int8"):
        path = export_ctranslate2(ckpt, workdir / f"ct2-{q}", quantization=q)
        out[q] = (CT2Translator(path, max_batch_size=0),
                  CT2Translator(path, max_batch_size=own_batch_tokens, batch_type="tokens"))
    return out


def marian_like(model: Transformer) -> torch.nn.Module:
    """A random-weight MarianMTModel with the Transformer's dimensions (bench-only import)."""
    from transformers import MarianConfig, MarianMTModel

    c = model.cfg
    vocab = model.tgt_embed.num_embeddings
    hf_cfg = MarianConfig(
        vocab_size=vocab, decoder_vocab_size=vocab, d_model=c.d_model, encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers, encoder_attention_heads=c.heads, decoder_attention_heads=c.heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function=c.activation,
        max_position_embeddings=c.max_positions, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID, forced_eos_token_id=None, scale_embedding=True, dropout=0.0,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return MarianMTModel(hf_cfg).eval()


def run_hf(hf: torch.nn.Module, batches: Batches, beam: int, steps: int) -> list[list[int]]:
    out: list[list[int]] = []
    for src, mask in batches:
        gen = hf.generate(input_ids=src, attention_mask=mask.long(), num_beams=beam, do_sample=False,
                          min_new_tokens=steps, max_new_tokens=steps, num_return_sequences=1)
        out += [[t for t in row[1:] if t not in (PAD_ID, EOS_ID)] for row in gen.tolist()]
    return out


def random_model(cfg: Config, tokenizer: Tokenizer, seed: int) -> Transformer:
    """Random weights whose EOS is never chosen before the length limit (see the module docstring)."""
    torch.manual_seed(seed)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint).eval()
    with torch.no_grad():
        model.tgt_embed.weight[EOS_ID] = 0.0  # EOS logit 0 (tied): never chosen before the length limit
        if model.out_proj is not None:
            model.out_proj.weight[EOS_ID] = 0.0
            model.out_proj.bias[EOS_ID] = -1e4
    return model


def tokenizer_for(cfg: Config) -> Tokenizer:
    if (cfg.run_dir / "spm.model").is_file() or (cfg.run_dir / "spm.src.model").is_file():
        return Tokenizer.from_files(cfg.run_dir)
    print(f"(no tokenizer in {cfg.run_dir}: training one on 20k training pairs)", file=sys.stderr)
    src, tgt = [], []
    from mt.data.corpus import iter_split

    for s, t in iter_split(cfg.data, cfg.data.train_split):
        src.append(s)
        tgt.append(t)
        if len(src) >= 20_000:
            break
    return train_sentencepiece(src, tgt, cfg.tokenizer)


def main(
    config: Path = typer.Option(Path("configs/multi30k_en_de.yaml"), help="Model size and corpus."),
    checkpoint: list[Path] = typer.Option(
        [], "--checkpoint", "-c",
        help="A trained checkpoint (else random weights); repeat to also time their ensemble against the first."),
    ensemble: int = typer.Option(0, help="Random-model mode: also time an ensemble of this many random models."),
    data: str | None = typer.Option(None, help="Override data.path (e.g. the Multi30k mirror folder)."),
    split: str = typer.Option("test_2016_flickr", help="Split whose source side is translated."),
    limit: int = typer.Option(0, help="Translate only the first N sentences (0 = all)."),
    beam: int = typer.Option(5, help="Beam size of the beam-search runs."),
    out_len: int = typer.Option(20, "--out-len", help="Random model: output tokens per sentence (+ EOS)."),
    threads: int = typer.Option(0, help="torch intra-op threads (0 = torch's default)."),
    hf: bool = typer.Option(True, help="Also time HF MarianMTModel.generate (random-model mode)."),
    uncached: bool = typer.Option(True, help="Also time the uncached re-decoding baseline."),
    ct2: bool = typer.Option(True, help="Also time the model exported to CTranslate2 (fp32 and int8)."),
    ct2_batch_tokens: int = typer.Option(
        4096, "--ct2-batch-tokens", help="CTranslate2's own batching row: max_batch_size in source tokens "
                                         "(batch_type='tokens'), over the whole input in one call."),
    bf16: bool | None = typer.Option(None, help="Also time mt in bf16 (default: where bf16 is native)."),
    peak_gflops: float = typer.Option(190.0, "--peak-gflops", help="fp32 peak of the machine, for MFU."),
    e2e_rounds: int = typer.Option(
        3, "--e2e-rounds", help="Alternating rounds of translate_lines and the search alone (0 = skip the e2e row)."),
) -> None:
    """Sentences/s and target tokens/s of greedy and beam search; cache speed-up; HF ratio."""
    if threads:
        torch.set_num_threads(threads)
    import tempfile

    from mt.model.checkpoint import load_for_inference

    members: list[Transformer] = []  # the ensemble's models (the first is `model`); empty: no ensemble run
    if checkpoint:
        from mt.deploy.loading import load_model

        model, tokenizer, cfg = load_for_inference(checkpoint[0], "cpu")
        if len(checkpoint) > 1:
            members = list(load_model(checkpoint, "cpu").engine.model.members)  # checks the tokenizers and pairs match
        decode = cfg.decode
        what = f"checkpoint {checkpoint[0]}" + (f" (+{len(checkpoint) - 1} in the ensemble)" if members else "")
        hf = False  # natural output lengths cannot be matched by a random HF model
    else:
        cfg = load_config(config)
        tokenizer = tokenizer_for(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=data or cfg.data.path)))
        model = random_model(cfg, tokenizer, 0)
        if ensemble > 1:
            members = [model] + [random_model(cfg, tokenizer, seed) for seed in range(1, ensemble)]
        decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, max_len_a=0.0, max_len_b=out_len))
        what = f"random weights, fixed output length {out_len} (+EOS)"
    if data:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=data))
    src_lines, ref_lines = read_split(cfg.data, split)
    if limit:
        src_lines, ref_lines = src_lines[:limit], ref_lines[:limit]
    ids = [seq or [EOS_ID] for seq in tokenizer.encode_src(src_lines)]  # empty lines: bare EOS source
    c = model.cfg
    print(f"bench_translate: {split}, {len(ids)} sentences, d_model {c.d_model}, {c.encoder_layers}+{c.decoder_layers} "
          f"layers, d_ff {c.d_ff}, vocab {model.tgt_embed.num_embeddings}, {model.num_parameters() / 1e6:.1f}M params; {what}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"decode.resources.max_tokens {decode.resources.max_tokens}, alpha {decode.search.alpha}")
    hf_model = marian_like(model) if hf else None
    bf16 = bf16_feature("cpu") is not None if bf16 is None else bf16
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16).eval() if bf16 else None
    workdir = Path(tempfile.mkdtemp(prefix="bench_translate."))
    translators = export_all(cfg, tokenizer, model, workdir, ct2_batch_tokens) if ct2 else {}
    if ct2:
        print(f"CTranslate2: 'mt batches' = mt's batches, each one translate_batch call (what `mt translate -c DIR` "
              f"does); 'own batching' = the whole input in one call with max_batch_size={ct2_batch_tokens}, "
              f"batch_type='tokens' (its documentation's advice)")
    print(f"{'search':<8} {'implementation':<30} {'sent/s':>8} {'tgt tok/s':>10} {'GFLOP/s':>8} {'MFU':>6} "
          f"{'time s':>7} {'BLEU':>6}")

    def report(label: str, impl: str, seconds: float, outputs: list[list[int]], rows: int,
               models: list[Transformer] | None = None, *, bleu: bool = True) -> float:
        tokens = sum(len(o) + 1 for o in outputs)
        flops = sum(decode_flops(m, len(s) + 1, len(o) + 1, rows) for m in models or [model]
                    for s, o in zip(ids, outputs))
        gflops = flops / seconds / 1e9
        shown = "-"
        if bleu and checkpoint:
            shown = f"{score(tokenizer.decode_tgt(outputs), [r.rstrip() for r in ref_lines]).bleu:6.2f}"
        print(f"{label:<8} {impl:<30} {len(ids) / seconds:8.1f} {tokens / seconds:10.0f} {gflops:8.2f} "
              f"{100 * gflops / peak_gflops:5.1f}% {seconds:7.2f} {shown:>6}")
        return len(ids) / seconds

    summary = []
    for k in (1, beam):
        label = "greedy" if k == 1 else f"beam {k}"
        order, batches = make_batches(ids, max(1, decode.resources.max_tokens // k))
        id_batches = [[ids[i] for i in rows] for rows in order]
        position = np.empty(len(ids), dtype=np.int64)
        position[np.concatenate(order)] = np.arange(len(ids))  # input index -> place in batch order
        warm = batches[-1:]  # the shortest batch, once per implementation: first-call allocations untimed
        timed(partial(run_mt, model, warm, decode, k))
        seconds, out = timed(partial(run_mt, model, batches, decode, k))
        outputs = [out[p] for p in position]
        cached = report(label, "mt (cached)", seconds, outputs, k)
        line = f"{label}:"
        if uncached:
            timed(partial(run_mt, UncachedDecoder(model), warm, decode, k))
            seconds_u, out_u = timed(partial(run_mt, UncachedDecoder(model), batches, decode, k))
            same = "identical output" if out_u == out else "OUTPUT DIFFERS"
            slow = report(label, "mt (uncached prefix)", seconds_u, outputs, k, bleu=False)
            line += f" cache speed-up x{cached / slow:.2f} ({same});"
        if hf_model is not None:
            timed(partial(run_hf, hf_model, warm, k, out_len + 1))
            seconds_h, out_h = timed(partial(run_hf, hf_model, batches, k, out_len + 1))
            hf_speed = report(label, "HF Marian generate", seconds_h, [o[:out_len] for o in out_h], k, bleu=False)
            line += f" mt/HF x{cached / hf_speed:.2f};"
        if model_bf16 is not None:
            timed(partial(run_mt, model_bf16, warm, decode, k))
            seconds_b, out_b = timed(partial(run_mt, model_bf16, batches, decode, k))
            fast = report(label, "mt bf16", seconds_b, [out_b[p] for p in position], k)
            line += f" bf16/fp32 x{fast / cached:.2f};"
        for quant, (translator, own) in translators.items():
            name = "CTranslate2 fp32" if quant == "none" else f"CTranslate2 {quant}"
            run_ct2(translator, id_batches[-1:], decode, k)
            seconds_c, out_c = timed(partial(run_ct2, translator, id_batches, decode, k))
            speed = report(label, f"{name}, mt batches", seconds_c, [out_c[p] for p in position], k)
            same = "" if quant != "none" else (", identical output" if out_c == out else ", output differs")
            run_ct2(own, id_batches[-1:], decode, k)
            seconds_o, out_o = timed(partial(run_ct2, own, [ids], decode, k))
            own_speed = report(label, f"{name}, own batching", seconds_o, out_o, k)
            line += f" mt/{name} x{cached / speed:.2f}{same} (own batching x{cached / own_speed:.2f});"
        if members:
            ens = Ensemble(members).eval()
            timed(partial(run_mt, ens, warm, decode, k))
            seconds_m, out_m = timed(partial(run_mt, ens, batches, decode, k))
            ens_speed = report(label, f"mt ensemble of {len(members)}", seconds_m, [out_m[p] for p in position], k,
                               models=members)
            line += f" ensemble of {len(members)} at x{ens_speed / cached:.2f} of one model's sent/s;"
        # End to end against the search alone, in alternating rounds (a loaded machine swings
        # more between two runs minutes apart than this ratio is about): best of each.
        dk = dataclasses.replace(decode, search=dataclasses.replace(decode.search, beam=k))
        # CPU time too: on a shared machine wall time swings with other jobs, CPU time much less.
        e2e_times, search_times, e2e_cpu, search_cpu = [], [], [], []
        for _ in range(e2e_rounds):
            cpu = time.process_time()
            seconds_e, texts = timed(partial(translate_lines, model, tokenizer, src_lines, dk, device="cpu"))
            e2e_times.append(seconds_e)
            cpu, before = time.process_time(), cpu
            e2e_cpu.append(cpu - before)
            search_times.append(timed(partial(run_mt, model, batches, decode, k))[0])
            search_cpu.append(time.process_time() - cpu)
        if e2e_rounds:
            same = "same text" if texts == tokenizer.decode_tgt(outputs) else "TEXT DIFFERS"
            report(label, "mt translate_lines e2e", min(e2e_times), outputs, k, bleu=False)
            line += (f" translate_lines / search alone x{min(e2e_times) / min(search_times):.3f} in time, "
                     f"x{min(e2e_cpu) / min(search_cpu):.3f} in CPU time "
                     f"(best of {e2e_rounds} alternating rounds, {same});")
        summary.append(line)
    shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(summary))


if __name__ == "__main__":
    typer.run(main)
