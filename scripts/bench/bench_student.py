"""Decoding speed of model shapes before training them: which student decodes fast on this CPU.

    .venv/bin/python scripts/bench/bench_student.py configs/multi30k_en_de.yaml configs/multi30k_en_de_student.yaml \
        --data data/multi30k --limit 200 --threads 1

Each config's model is built with random weights whose EOS logit is zeroed, so every shape
decodes exactly `--out-len` tokens (+ EOS) per sentence: the speed of trained models differs
only through their output lengths (a trained student writes about as many tokens as its teacher,
being trained on its output). All shapes share one sentencepiece model (trained here on the
first `--train-pairs` (20k) training pairs, `tokenizer.vocab_size` of the first config) and decode the source side
of `--split` with `mt.decode.translate.translate_lines` (tokenise, search, detokenise): one
sentence at a time (what a server at concurrency 1 does) and in the config's token-budgeted
batches (what `mt translate` does), greedy and beam 5. Prints a markdown table and writes it
with `--out FILE.json`. Speeds are sentences per CPU-second of this process (`time.process_time`,
so keep `--threads 1`): other processes on a shared machine do not count against a shape.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch
import typer

from mt.config_load import load_config
from mt.data.corpus import read_split
from mt.data.tokenizer import EOS_ID, train_sentencepiece
from mt.decode.translate import translate_lines
from mt.device import cpu_name
from mt.model.transformer import Transformer


def _time(fn, repeat: int) -> float:
    """Best CPU time of this process over `repeat` calls: with one thread that is the model's own
    work, robust to other processes on a shared machine (wall time is not)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main(
    configs: list[Path] = typer.Argument(..., help="Configs whose model shapes are compared (the first: the baseline)."),
    data: str | None = typer.Option(None, help="Override data.path (e.g. the Multi30k mirror)."),
    split: str = typer.Option("test_2016_flickr", help="Split whose source side is translated."),
    limit: int = typer.Option(200, help="Sentences translated."),
    out_len: int = typer.Option(20, "--out-len", help="Output tokens per sentence (+ EOS)."),
    threads: int = typer.Option(1, help="torch intra-op threads."),
    repeat: int = typer.Option(2, help="Timed repetitions (best kept)."),
    train_pairs: int = typer.Option(20000, "--train-pairs", help="Training pairs the shared tokenizer learns from."),
    out: Path | None = typer.Option(None, help="Write the rows as JSON here."),
) -> None:
    torch.set_num_threads(threads)
    first = load_config(configs[0], [f"data.path={data}"] if data else [])
    src, _ = read_split(first.data, split)
    src = src[:limit]
    train_src, train_tgt = read_split(first.data, first.data.train_split)
    tokenizer = train_sentencepiece(train_src[:train_pairs], train_tgt[:train_pairs], first.tokenizer)
    rows = []
    for path in configs:
        cfg = load_config(path, [f"data.path={data}"] if data else [])
        torch.manual_seed(0)
        model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=tokenizer.joint)
        with torch.no_grad():
            model.tgt_embed.weight[EOS_ID] = 0.0
        if not cfg.model.tie_embeddings and hasattr(model, "out_proj"):
            model.out_proj.weight.data[EOS_ID] = 0.0
        model.eval()
        m = cfg.model
        row = {"config": str(path), "shape": f"d{m.d_model} {m.encoder_layers}+{m.decoder_layers} ff{m.d_ff}",
               "params": model.num_parameters()}
        for beam in (1, 5):
            decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=beam, max_len_a=0.0, max_len_b=out_len, forbid_unk=False))
            one = _time(lambda m=model, d=decode: [translate_lines(m, tokenizer, [s], d, device="cpu") for s in src],
                        repeat)
            batched = _time(lambda m=model, d=decode: translate_lines(m, tokenizer, src, d, device="cpu"), repeat)
            name = "greedy" if beam == 1 else f"beam{beam}"
            row[f"{name}_one_sent_s"] = round(len(src) / one, 1)
            row[f"{name}_batched_sent_s"] = round(len(src) / batched, 1)
        rows.append(row)
    base = rows[0]
    keys = [k for k in base if k.endswith("_sent_s")]
    print(f"sentences per CPU-second; CPU: {cpu_name()}, torch {torch.__version__}, {threads} thread(s); "
          f"{len(src)} sentences of {split}, {out_len} output tokens each, random weights")
    print("| config | shape | params | " + " | ".join(k.replace("_sent_s", " sent/s") for k in keys) + " |")
    print("|---|---|---|" + "---|" * len(keys))
    for row in rows:
        cells = [f"{row[k]} ({row[k] / base[k]:.2f}x)" for k in keys]
        print(f"| {Path(row['config']).name} | {row['shape']} | {row['params'] / 1e6:.1f}M | " + " | ".join(cells) + " |")
    if out is not None:
        out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
